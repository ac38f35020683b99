"""Proving a hang without waiting for it: a rank inside a collective that a finished peer never issued.

A rank that FINISHED its job (its reply is in) issues no collective until
the next job, and the parent posts the next job only after this one ends.
So a rank still inside its k-th collective on a group, while a finished
member of that group issued fewer than k collectives there in this job, is
waiting for a call that will never come: the job is hung whatever the
deadline. Before this proof such a hang waited for the backend's timeout,
the deadline policy's floor times the machine's load (harness/ranks/deadline.py):
replaying slime's history, its ``tp_entropy_flag`` bad input waited about
120 s in every revision, verl's zigzag CP one up to 200 s, for a verdict
that was certain after milliseconds.

What each rank shares (``harness.ranks.process`` writes it, the pool reads
it): its last collective's description (the existing mirror), and two
integers: the position of that collective among the rank's collectives on
its group in this job, and whether the rank is still inside the call.
A finished rank's reply carries how many collectives it issued per group.

Only false negatives are allowed, never a false hang:

* the proof needs every still-running rank to be inside a traced
  collective (a computing rank may yet raise, and its exception is then the
  cause), at least one of them proven, and the same state seen for
  ``HOLD_S`` (the shared integers and text are not written atomically, so
  one torn read must not decide);
* a collective issued asynchronously (``async_op=True``, NCCL's kernels) is
  not "inside" once the call returns, so such a wait falls back to the
  timeout, as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

POSITION, INSIDE = 0, 1  # the two integers a rank shares beside its last collective's text
CALL_SLOTS = 2
HOLD_S = 2.0  # the proof must hold this long, unchanged, before the job is declared hung
POLL_S = 0.25  # how often the parent re-reads the running ranks while one has finished

_GROUP = re.compile(r"group=\(([\d, ]*)\)")


def group_of(collective: str) -> tuple[int, ...]:
    """The ranks of a collective as ``harness.ranks.trace.describe`` writes it (``group=(0, 2)``); () if unknown."""
    match = _GROUP.search(collective)
    return tuple(int(rank) for rank in match.group(1).split(",") if rank.strip()) if match else ()


@dataclass(frozen=True)
class Waiting:
    """One running rank, as its shared state reads: its last collective and whether it is inside it."""

    collective: str
    position: int
    inside: bool


@dataclass(frozen=True)
class Stranded:
    """A rank proven stuck: inside its ``position``-th collective on ``group``, which ``short`` never reached."""

    group: tuple[int, ...]
    position: int
    short: tuple[tuple[int, int], ...]  # (finished rank, collectives it issued on the group)


def prove(waiting: dict[int, Waiting], issued: dict[int, dict]) -> dict[int, Stranded]:
    """The running ranks proven stuck, or {} when the state proves nothing (see the module docstring).

    ``waiting``: every running rank's shared state; ``issued``: every finished
    rank's collectives per group (group ranks -> count) in this job.
    """
    if not waiting or not issued or not all(state.inside for state in waiting.values()):
        return {}
    stranded = {}
    for rank, state in waiting.items():
        group = group_of(state.collective)
        short = tuple(
            (peer, issued[peer].get(group, 0))
            for peer in group
            if peer in issued and issued[peer].get(group, 0) < state.position
        )
        if short:
            stranded[rank] = Stranded(group, state.position, short)
    return stranded


class Watch:
    """The proof over time: it counts only once the same state has held for ``HOLD_S``."""

    def __init__(self, hold_s: float = HOLD_S):
        self.hold_s = hold_s
        self._state = None
        self._since = 0.0

    def observe(self, now: float, waiting: dict[int, Waiting], issued: dict[int, dict]) -> dict[int, Stranded]:
        stranded = prove(waiting, issued)
        if not stranded:
            self._state = None
            return {}
        state = (tuple(sorted(waiting.items())), tuple(sorted(issued)))
        if state != self._state:
            self._state, self._since = state, now
            return {}
        return stranded if now - self._since >= self.hold_s else {}


def proof_lines(stranded: dict[int, Stranded]) -> list[str]:
    """One line per proven rank, naming the finished peer(s) that never reached its collective."""
    lines = []
    for rank, proof in sorted(stranded.items()):
        peers = "; ".join(f"rank {peer} finished the job after {count} there" for peer, count in proof.short)
        lines.append(f"rank {rank} is inside its collective #{proof.position} on group {proof.group}: {peers}")
    return lines
