"""Warnings raised on the ranks while a job ran: evidence for a failure, carried as data.

A target's defect is often announced by torch before any check sees it: an
in-place ``dist.all_reduce`` on a tensor with a graph prints ``c10d::allreduce_:
an autograd kernel was not registered ... silently incorrect behavior`` and the
gradient is then wrong at ``tp >= 2``. That line goes to the rank's stderr,
which no verdict shows. So each rank records the warnings of every job
(``capture``, then ``summary``) and sends them with its reply; the parent
files them (``note``) into whichever collection is open (``collecting``): a
check opens one per call and attaches what it holds to its failure
(``harness.checks.diagnosis.attach``).
"""

from __future__ import annotations

import contextlib
import warnings
from contextvars import ContextVar

MAX_PER_JOB = 16  # distinct warnings a rank sends per job (a per-chunk warning must not flood the pipe)
MAX_MESSAGE = 600  # characters of one warning's message kept

_OPEN: ContextVar[list | None] = ContextVar("lph_rank_warnings", default=None)


@contextlib.contextmanager
def capture():
    """Record every warning raised inside the block (``always``: a repeated one is seen on each job)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def summary(caught: list) -> list[dict]:
    """Plain, picklable entries for the recorded ``warnings.WarningMessage`` list, deduplicated, capped."""
    entries, seen = [], set()
    for item in caught:
        entry = {
            "category": item.category.__name__,
            "message": str(item.message)[:MAX_MESSAGE],
            "where": f"{item.filename}:{item.lineno}",
        }
        key = (entry["category"], entry["message"])
        if key in seen:
            continue
        seen.add(key)
        entries.append(entry)
        if len(entries) == MAX_PER_JOB:
            break
    return entries


def note(rank: int, entries) -> None:
    """File rank ``rank``'s warnings into the open collection (none open: dropped)."""
    collection = _OPEN.get()
    if collection is not None and entries:
        collection.extend((rank, dict(entry)) for entry in entries)


def reemit(caught: list) -> None:
    """Raise recorded warnings again (an in-process job must not hide them from pytest's summary)."""
    for item in caught:
        warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)


@contextlib.contextmanager
def collecting():
    """Collect the warnings every rank reports inside the block; yields a list of ``(rank, entry)``."""
    collection: list = []
    token = _OPEN.set(collection)
    try:
        yield collection
    finally:
        _OPEN.reset(token)


def merged(collection: list) -> list[dict]:
    """One entry per distinct (category, message), with the sorted ranks that raised it."""
    by_key: dict = {}
    for rank, entry in collection:
        key = (entry["category"], entry["message"])
        if key not in by_key:
            by_key[key] = {**entry, "ranks": []}
        if rank not in by_key[key]["ranks"]:
            by_key[key]["ranks"].append(rank)
    for entry in by_key.values():
        entry["ranks"].sort()
    return list(by_key.values())
