"""One rank process of the pool: its process groups, its job loop, and the layout both sides share.

The parent side (``harness.ranks.pool``) spawns ``_child_main`` with the spawn start
method, so this module is what every rank imports first; it is kept apart so
that a rank imports only what a rank runs, and so that the pool's parent
logic (deadlines, failure classification, respawns) reads on its own. The
layout helpers (``factorisations``, ``layout_groups``) and ``RankContext``
are the contract between the two sides: Megatron order, ``rank = cp_rank * tp
+ tp_rank``, every factorisation's groups made once at start-up.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from harness.ranks.deadlock import INSIDE, POSITION

if TYPE_CHECKING:
    from harness.ranks.trace import CollectiveTracer

LAST_COLLECTIVE_BYTES = 512
ORPHAN_POLL_S = 0.5
PICKLE_PROTOCOL = 5


@dataclass
class RankContext:
    """What a job knows about its rank: position in the layout, its TP/CP groups, the collective tracer."""

    rank: int
    world_size: int
    tp: int
    cp: int
    tp_rank: int
    cp_rank: int
    tp_group: object
    cp_group: object
    tracer: CollectiveTracer | None


def factorisations(world_size: int) -> list[tuple[int, int]]:
    """Every (tp, cp) with tp * cp == world_size, tp ascending."""
    return [(tp, world_size // tp) for tp in range(1, world_size + 1) if world_size % tp == 0]


def layout_groups(world_size: int, tp: int, cp: int) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """TP groups (consecutive ranks) and CP groups (ranks of equal tp_rank), Megatron order."""
    tp_groups = [tuple(c * tp + t for t in range(tp)) for c in range(cp)]
    cp_groups = [tuple(c * tp + t for c in range(cp)) for t in range(tp)]
    return tp_groups, cp_groups


# ---- child side ---------------------------------------------------------------


def _exit_when_orphaned(parent_pid: int) -> None:
    """A rank whose parent died abruptly (no atexit) must not linger: poll the parent pid."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(ORPHAN_POLL_S)


def _make_groups(world_size: int, pg_timeout_s: float) -> dict:
    """All TP and CP groups of every factorisation, size 1 included, created in the same order on every rank.

    Each gets the pool's timeout explicitly: ``new_group`` without one takes
    the backend default (30 min for gloo), not the world group's, and a rank
    blocked in a subgroup collective then outlives every deadline.
    """
    import torch.distributed as dist

    groups = {}
    for tp, cp in factorisations(world_size):
        tp_groups, cp_groups = layout_groups(world_size, tp, cp)
        for ranks in tp_groups + cp_groups:
            if ranks not in groups:
                groups[ranks] = dist.new_group(list(ranks), timeout=timedelta(seconds=pg_timeout_s))
    return groups


def _set_collective_timeout(groups: dict, timeout_s: float) -> None:
    """Make every group of this rank (the world included) give up waiting after ``timeout_s``."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _set_pg_timeout

    timeout, rank = timedelta(seconds=timeout_s), dist.get_rank()
    _set_pg_timeout(timeout, dist.group.WORLD)
    for ranks, group in groups.items():
        if rank in ranks:  # a rank holds only a placeholder for the groups it is not in
            _set_pg_timeout(timeout, group)


def _join(rank: int, world_size: int, rendezvous: str, pg_timeout_s: float, backend: str) -> dict:
    """Join the world's process group at ``rendezvous`` and make every TP/CP group; returns the groups."""
    import torch.distributed as dist

    dist.init_process_group(
        backend,
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=pg_timeout_s),
    )
    return _make_groups(world_size, pg_timeout_s)


def _start_rank(rank: int, world_size: int, rendezvous: str, pg_timeout_s: float, last_collective, calls):
    import torch

    from harness.ranks import device
    from harness.ranks.trace import CollectiveTracer, describe

    torch.set_num_threads(1)
    # gloo on the CPU (LPH_DEVICE unset); under LPH_DEVICE=cuda this pins the rank to its GPU first.
    backend = device.setup_rank(rank, world_size)

    def mirror(record) -> None:
        # Text, then position, then "inside": the parent's proof re-reads until they agree (harness/ranks/deadlock.py).
        last_collective.value = describe(record).encode()[: LAST_COLLECTIVE_BYTES - 1]
        calls[POSITION] = tracer.per_group[record.group_ranks]
        calls[INSIDE] = 1

    def returned(record) -> None:
        calls[INSIDE] = 0

    tracer = CollectiveTracer(on_record=mirror, on_return=returned).install()
    return tracer, backend, _join(rank, world_size, rendezvous, pg_timeout_s, backend)


def _rejoin(rank: int, world_size: int, rendezvous: str, pg_timeout_s: float, backend: str, groups: dict) -> None:
    """Leave the process groups a collective timeout broke and join fresh ones (``groups`` updated in place).

    After a collective timeout gloo closes its pairs, so the groups cannot be
    used again; the process itself is fine. Re-joining costs a rendezvous,
    where a respawn costs every rank's torch import (seconds on 2 cores):
    this is what keeps a hang-class bug's every hung example cheap.
    """
    import torch.distributed as dist

    dist.destroy_process_group()
    groups.clear()
    groups.update(_join(rank, world_size, rendezvous, pg_timeout_s, backend))


def _load(cache: dict, path: str):
    if path not in cache:
        from harness.names import resolve

        cache[path] = resolve(path)
    return cache[path]


def _context(rank: int, world_size: int, tp: int, cp: int, groups: dict, tracer) -> RankContext:
    tp_rank, cp_rank = rank % tp, rank // tp
    tp_groups, cp_groups = layout_groups(world_size, tp, cp)
    return RankContext(
        rank=rank,
        world_size=world_size,
        tp=tp,
        cp=cp,
        tp_rank=tp_rank,
        cp_rank=cp_rank,
        tp_group=groups[tp_groups[cp_rank]],
        cp_group=groups[cp_groups[tp_rank]],
        tracer=tracer,
    )


def _serve(rank: int, world_size: int, conn, tracer, groups: dict, last_collective, calls, rejoin) -> None:
    """Answer jobs until told to stop or the parent's end of the pipe closes; a raising job is reported, not fatal.

    ``("rejoin", rendezvous)`` replaces the process groups (``rejoin(rendezvous)``) and answers ``None``.
    A job's reply carries the collectives it issued per group, the finished
    side of the parent's hang proof (harness/ranks/deadlock.py).
    """
    from harness.ranks import rank_warnings
    from harness.ranks.device import to_host

    functions: dict = {}
    collective_timeout_s = None
    while True:
        try:
            blob = conn.recv_bytes()
        except EOFError:
            return
        tracer.reset()
        last_collective.value = b""
        calls[POSITION], calls[INSIDE] = 0, 0
        caught: list = []
        try:
            message = pickle.loads(blob)
            if message[0] == "stop":
                return
            if message[0] == "rejoin":
                rejoin(message[1])
                collective_timeout_s = None
                conn.send_bytes(pickle.dumps(("ok", None), protocol=PICKLE_PROTOCOL))
                continue
            _, fn_path, payload, tp, cp, timeout_s = message
            if timeout_s != collective_timeout_s:
                _set_collective_timeout(groups, timeout_s)
                collective_timeout_s = timeout_s
            with rank_warnings.capture() as caught:
                result = _load(functions, fn_path)(payload, _context(rank, world_size, tp, cp, groups, tracer))
            # Whatever device the job used, the parent receives CPU tensors (a no-op on the CPU).
            # A job's reply carries the warnings it raised (evidence for a failure: harness.ranks.rank_warnings).
            reply = pickle.dumps(
                ("ok", to_host(result), rank_warnings.summary(caught), dict(tracer.per_group)),
                protocol=PICKLE_PROTOCOL,
            )
        except BaseException:
            reply = pickle.dumps(
                ("error", traceback.format_exc(), rank_warnings.summary(caught), dict(tracer.per_group)),
                protocol=PICKLE_PROTOCOL,
            )
        conn.send_bytes(reply)


def _child_main(rank, world_size, rendezvous, pg_timeout_s, conn, last_collective, calls, parent_pid) -> None:
    """Entry point of one rank process; module level so that the spawn start method can import it.

    SIGINT is ignored: on Ctrl-C the parent tears the pool down, and ranks
    printing KeyboardInterrupt tracebacks would only bury the real report.
    A stopped rank leaves through ``os._exit``: tearing down an interpreter
    with torch loaded costs about a second, and only the std streams need
    flushing.
    """
    os.environ["OMP_NUM_THREADS"] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    try:
        tracer, backend, groups = _start_rank(rank, world_size, rendezvous, pg_timeout_s, last_collective, calls)
    except BaseException:
        conn.send_bytes(pickle.dumps(("error", traceback.format_exc())))
        return
    conn.send_bytes(pickle.dumps(("ok", None)))

    def rejoin(path: str) -> None:
        _rejoin(rank, world_size, path, pg_timeout_s, backend, groups)

    _serve(rank, world_size, conn, tracer, groups, last_collective, calls, rejoin)
    import torch.distributed as dist

    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
