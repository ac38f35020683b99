"""A persistent pool of gloo rank processes, one per world size.

Spawning ranks costs seconds (each imports torch and joins a process group),
while a property test runs hundreds of small distributed jobs. So the ranks
of a world size are started once and then run a job in milliseconds:

* spawn start method, ``OMP_NUM_THREADS=1`` (many ranks share few cores),
  gloo, ``file://`` rendezvous in a fresh temp dir per start, so parallel
  pytest-xdist workers and respawns never collide and no port is involved;
  under ``LPH_DEVICE=cuda`` each rank is pinned to a GPU and the backend is
  NCCL (one GPU per rank) or gloo with CUDA tensors (ranks sharing a GPU),
  chosen by ``harness.device``; results always come back as CPU tensors;
* every (tp, cp) factorisation of the world gets its TP and CP groups at
  start-up, in Megatron order (``rank = cp_rank * tp + tp_rank``): creating a
  group is itself a collective, so it is done once, in the same order on all
  ranks, and a job only picks its groups;
* a job is an importable ``'module:function'`` called on every rank as
  ``fn(payload, ctx)``; payload and results cross as plain pickled bytes, so
  tensors travel by value, never as shared-memory file descriptors;
* every job has a deadline (``harness.deadline`` sizes it from the measured
  cost of the same job shape), enforced twice: each rank sets it as the
  timeout of all its process groups, so a rank blocked in a collective its
  peers never join raises the backend's timeout (``CollectiveHang``, a
  ``RankHang``, with its traceback); and the PARENT stops waiting a grace
  later (``RankHang``), so a hang becomes a failure naming the rank, never a
  stuck CI job. Both name each stuck rank and the last collective it issued
  (the tracer mirrors it into shared memory before each call); a raising or
  dying rank becomes ``RankError`` with its traceback or exit code
  (``harness.rank_errors``). A pool left inconsistent (a rank stuck, dead, or
  past a collective timeout, after which gloo's pairs are closed) is killed
  and transparently respawned by the next job, so one bad example never
  poisons the next;
* ranks exit when the parent dies (a watchdog thread, and daemon processes),
  and ``shutdown_all`` (registered with atexit) leaves no process behind.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from harness import rank_errors
from harness.rank_errors import GRACE_S, CollectiveHang, PoolStartError, RankError, RankHang, is_collective_timeout

if TYPE_CHECKING:
    from harness.trace import CollectiveTracer

__all__ = ["CollectiveHang", "RankContext", "RankError", "RankHang", "RankPool", "get_pool", "shutdown_all"]

START_TIMEOUT_S = 120.0
START_ATTEMPTS = 2  # a failed start is retried once before it is reported (PoolStartError)
STOP_JOIN_S = 3.0
KILL_JOIN_S = 2.0
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


def _start_rank(rank: int, world_size: int, rendezvous: str, pg_timeout_s: float, last_collective):
    import torch
    import torch.distributed as dist

    from harness import device
    from harness.trace import CollectiveTracer, describe

    torch.set_num_threads(1)
    # gloo on the CPU (LPH_DEVICE unset); under LPH_DEVICE=cuda this pins the rank to its GPU first.
    backend = device.setup_rank(rank, world_size)
    dist.init_process_group(
        backend,
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=pg_timeout_s),
    )

    def mirror(record) -> None:
        last_collective.value = describe(record).encode()[: LAST_COLLECTIVE_BYTES - 1]

    tracer = CollectiveTracer(on_record=mirror).install()
    return tracer, _make_groups(world_size, pg_timeout_s)


def _load(cache: dict, path: str):
    if path not in cache:
        module_name, _, function_name = path.partition(":")
        cache[path] = getattr(importlib.import_module(module_name), function_name)
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


def _serve(rank: int, world_size: int, conn, tracer, groups: dict, last_collective) -> None:
    """Answer jobs until told to stop or the parent's end of the pipe closes; a raising job is reported, not fatal."""
    from harness.device import to_host

    functions: dict = {}
    collective_timeout_s = None
    while True:
        try:
            blob = conn.recv_bytes()
        except EOFError:
            return
        tracer.reset()
        last_collective.value = b""
        try:
            message = pickle.loads(blob)
            if message[0] == "stop":
                return
            _, fn_path, payload, tp, cp, timeout_s = message
            if timeout_s != collective_timeout_s:
                _set_collective_timeout(groups, timeout_s)
                collective_timeout_s = timeout_s
            result = _load(functions, fn_path)(payload, _context(rank, world_size, tp, cp, groups, tracer))
            # Whatever device the job used, the parent receives CPU tensors (a no-op on the CPU).
            reply = pickle.dumps(("ok", to_host(result)), protocol=PICKLE_PROTOCOL)
        except BaseException:
            reply = pickle.dumps(("error", traceback.format_exc()), protocol=PICKLE_PROTOCOL)
        conn.send_bytes(reply)


def _child_main(rank, world_size, rendezvous, pg_timeout_s, conn, last_collective, parent_pid) -> None:
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
        tracer, groups = _start_rank(rank, world_size, rendezvous, pg_timeout_s, last_collective)
    except BaseException:
        conn.send_bytes(pickle.dumps(("error", traceback.format_exc())))
        return
    conn.send_bytes(pickle.dumps(("ok", None)))
    _serve(rank, world_size, conn, tracer, groups, last_collective)
    import torch.distributed as dist

    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---- parent side ---------------------------------------------------------------


def _exit_description(exitcode: int | None) -> str:
    if exitcode is None:
        return "rank process closed its pipe but has not exited"
    if exitcode < 0:
        try:
            return f"rank process was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"rank process was killed by signal {-exitcode}"
    return f"rank process exited with code {exitcode}"


class RankPool:
    """``world_size`` persistent gloo ranks, started on first use; see the module docstring."""

    def __init__(self, world_size: int, *, pg_timeout_s: float = 20.0):
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self.pg_timeout_s = pg_timeout_s
        self._procs: list = []
        self._conns: list = []
        self._last: list = []
        self._tmpdir: str | None = None
        self.jobs_run = 0  # jobs posted since the last (re)spawn: the first one pays the ranks' imports
        _ALL_POOLS.add(self)

    @property
    def alive(self) -> bool:
        """All ranks are running; a pool that is not alive respawns on the next ``run``."""
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def start(self) -> None:
        """Spawn the ranks and wait until each has joined the process group and made its groups (no-op if alive).

        A start that fails is retried once from scratch (a loaded machine can
        miss the start deadline, or a rendezvous can fail); a second failure
        raises ``PoolStartError``, which the gate reads as ERROR, not FAIL.
        """
        if self.alive:
            return
        failures = []
        for _ in range(START_ATTEMPTS):
            self._reap(0.0)
            self._spawn()
            _, errors, stuck = self._collect(START_TIMEOUT_S)
            if not errors and not stuck:
                return
            self._reap(0.0)
            if errors:
                failures.append(rank_errors.error_lines(errors))
            else:
                failures.append(f"rank(s) {sorted(stuck)} not ready within {START_TIMEOUT_S:.0f} s")
        header = f"the rank pool of world size {self.world_size} failed to start ({START_ATTEMPTS} attempts)"
        raise PoolStartError("\n".join([header, *failures]))

    def run(self, fn: str, payload, *, tp: int, cp: int, timeout_s: float = 60.0) -> list:
        """Run ``fn(payload, ctx)`` on every rank; one result per global rank, in rank order.

        ``timeout_s`` is the job's deadline: every rank's process groups time
        out after it, and the parent stops waiting a grace later. Raises
        ``RankError`` (a rank raised or died), ``CollectiveHang`` (ranks
        gave up waiting in a collective) or ``RankHang`` (a rank still busy
        at the parent's deadline); the pool is respawned by the next call
        whenever a failure left it inconsistent.
        """
        if tp * cp != self.world_size:
            raise ValueError(f"tp={tp} x cp={cp} = {tp * cp} must equal the pool's world_size={self.world_size}")
        self.start()
        blob = pickle.dumps(("job", fn, payload, tp, cp, float(timeout_s)), protocol=PICKLE_PROTOCOL)
        for last in self._last:
            last.value = b""
        self._post(blob)
        self.jobs_run += 1
        results, errors, stuck = self._collect(timeout_s + GRACE_S)
        stuck_at = {rank: self._last_collective(rank) for rank in sorted(stuck)}
        timed_out = {rank: text for rank, text in errors.items() if is_collective_timeout(text)}
        last = {rank: self._last_collective(rank) for rank in timed_out}
        if stuck or timed_out or not self.alive:
            self._reap(0.0)
        where = rank_errors.layout(self.world_size, fn, tp, cp)
        if len(timed_out) < len(errors):
            raise RankError(rank_errors.error_message(where, errors, stuck_at))
        if timed_out:
            message = rank_errors.timeout_message(where, list(results), timeout_s, timed_out, last)
            raise CollectiveHang("\n".join([message, rank_errors.stuck_lines(stuck_at)]).rstrip())
        if stuck_at:
            raise RankHang(rank_errors.hang_message(where, self.world_size, timeout_s, stuck_at))
        return [results[rank] for rank in range(self.world_size)]

    def shutdown(self) -> None:
        """Stop the ranks (a stop message, then terminate, then kill) and remove the rendezvous directory."""
        self._request_stop()
        self._reap(STOP_JOIN_S)

    def _spawn(self) -> None:
        ctx = mp.get_context("spawn")
        self.jobs_run = 0
        self._tmpdir = tempfile.mkdtemp(prefix="lph-pool-")
        rendezvous = os.path.join(self._tmpdir, "rendezvous")
        previous = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            for rank in range(self.world_size):
                self._spawn_rank(ctx, rank, rendezvous)
        finally:
            if previous is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = previous

    def _spawn_rank(self, ctx, rank: int, rendezvous: str) -> None:
        parent_conn, child_conn = ctx.Pipe()
        # No lock: a rank killed while holding it would block the parent reading its last collective.
        last = ctx.Array("c", LAST_COLLECTIVE_BYTES, lock=False)
        proc = ctx.Process(
            target=_child_main,
            name=f"lph-rank{rank}of{self.world_size}",
            daemon=True,
            args=(rank, self.world_size, rendezvous, self.pg_timeout_s, child_conn, last, os.getpid()),
        )
        proc.start()
        child_conn.close()
        self._procs.append(proc)
        self._conns.append(parent_conn)
        self._last.append(last)

    def _post(self, blob: bytes) -> None:
        """Send a job to every rank; a rank that died meanwhile is reported by ``_collect`` through its sentinel."""
        for conn in self._conns:
            try:
                conn.send_bytes(blob)
            except OSError:
                pass

    def _collect(self, timeout_s: float) -> tuple[dict, dict, set]:
        """One reply per rank until the deadline: (results, errors, ranks still pending).

        The first error shortens the deadline to a grace period: the other
        ranks either finish or are stuck in a collective the failed rank
        never joined, and waiting longer would only delay the report.
        """
        results, errors, pending = {}, {}, set(range(self.world_size))
        deadline = time.monotonic() + timeout_s
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            waitables = {self._conns[rank]: rank for rank in pending}
            waitables.update({self._procs[rank].sentinel: rank for rank in pending})
            for ready in mp_connection.wait(list(waitables), timeout=remaining):
                rank = waitables[ready]
                if rank not in pending:
                    continue
                pending.discard(rank)
                status, value = self._receive(rank)
                if status == "ok":
                    results[rank] = value
                else:
                    errors[rank] = value
                    deadline = min(deadline, time.monotonic() + GRACE_S)
        return results, errors, pending

    def _receive(self, rank: int) -> tuple[str, object]:
        conn = self._conns[rank]
        try:
            if conn.poll():
                return pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            pass
        except Exception:
            return "error", "the parent could not unpickle this rank's reply:\n" + traceback.format_exc()
        self._procs[rank].join(KILL_JOIN_S)
        return "error", _exit_description(self._procs[rank].exitcode)

    def _last_collective(self, rank: int) -> str:
        text = self._last[rank].value.decode(errors="replace")
        return text or "(no collective issued in this job)"

    def _request_stop(self) -> None:
        stop = pickle.dumps(("stop",))
        for proc, conn in zip(self._procs, self._conns):
            if proc.is_alive():
                try:
                    conn.send_bytes(stop)
                except (OSError, ValueError):
                    pass

    def _reap(self, grace_s: float) -> None:
        """Give the ranks ``grace_s`` in all to exit, then terminate, then kill; forget them and the temp dir."""
        deadline = time.monotonic() + grace_s
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(KILL_JOIN_S)
            if proc.is_alive():
                proc.kill()
                proc.join(KILL_JOIN_S)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns, self._last = [], [], []
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


_ALL_POOLS: weakref.WeakSet[RankPool] = weakref.WeakSet()
_POOLS: dict[int, RankPool] = {}


def get_pool(world_size: int) -> RankPool:
    """This process's pool for ``world_size``, created on first use and started on its first job."""
    if world_size not in _POOLS:
        _POOLS[world_size] = RankPool(world_size)
    return _POOLS[world_size]


def shutdown_all() -> None:
    """Stop every pool of this process (stop messages to all first, so the ranks exit in parallel)."""
    pools = list(_ALL_POOLS)
    for pool in pools:
        pool._request_stop()
    for pool in pools:
        pool._reap(STOP_JOIN_S)
    _POOLS.clear()


atexit.register(shutdown_all)
