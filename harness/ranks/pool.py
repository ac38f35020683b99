"""A persistent pool of gloo rank processes, one per world size.

Spawning ranks costs seconds (each imports torch and joins a process group),
while a property test runs hundreds of small distributed jobs. So the ranks
of a world size are started once and then run a job in milliseconds:

* spawn start method, ``OMP_NUM_THREADS=1`` (many ranks share few cores),
  gloo, ``file://`` rendezvous in a fresh temp dir per start, so parallel
  pytest-xdist workers and respawns never collide and no port is involved;
  under ``LPH_DEVICE=cuda`` each rank is pinned to a GPU and the backend is
  NCCL (one GPU per rank) or gloo with CUDA tensors (ranks sharing a GPU),
  chosen by ``harness.ranks.device``; results always come back as CPU tensors;
* every (tp, cp) factorisation of the world gets its TP and CP groups at
  start-up, in Megatron order (``rank = cp_rank * tp + tp_rank``): creating a
  group is itself a collective, so it is done once, in the same order on all
  ranks, and a job only picks its groups;
* a job is an importable ``'module:function'`` called on every rank as
  ``fn(payload, ctx)``; payload and results cross as plain pickled bytes, so
  tensors travel by value, never as shared-memory file descriptors;
* every job has a deadline (``harness.ranks.deadline`` sizes it from the measured
  cost of the same job shape), enforced twice: each rank sets it as the
  timeout of all its process groups, so a rank blocked in a collective its
  peers never join raises the backend's timeout (``CollectiveHang``, a
  ``RankHang``, with its traceback); and the PARENT stops waiting a grace
  later (``RankHang``), so a hang becomes a failure naming the rank, never a
  stuck CI job. Both name each stuck rank and the last collective it issued
  (the tracer mirrors it into shared memory before each call). Sooner than
  both, the parent proves a hang when a rank is inside a collective that a
  peer which already finished the job never issued (``harness.ranks.deadlock``):
  the pool is then killed at once instead of waiting out the deadline; a raising or
  dying rank becomes ``RankError`` with its traceback or exit code
  (``harness.ranks.errors``). A pool left inconsistent (a rank stuck, dead, or
  past a collective timeout, after which gloo's pairs are closed) is never
  reused as is: after a collective timeout on gloo every rank leaves its
  process groups and joins fresh ones (milliseconds, where a respawn costs
  every rank's torch import); otherwise it is killed and transparently
  respawned by the next job, so one bad example never poisons the next;
* ranks exit when the parent dies (a watchdog thread, and daemon processes),
  and ``shutdown_all`` (registered with atexit) leaves no process behind.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import shutil
import signal
import tempfile
import time
import traceback
import weakref

from harness.ranks import deadlock, device, rank_warnings
from harness.ranks import errors as rank_errors
from harness.ranks.errors import GRACE_S, CollectiveHang, PoolStartError, RankError, RankHang, hang_errors
from harness.ranks.process import (
    LAST_COLLECTIVE_BYTES,
    PICKLE_PROTOCOL,
    RankContext,
    _child_main,
)

__all__ = ["CollectiveHang", "RankContext", "RankError", "RankHang", "RankPool", "get_pool", "shutdown_all"]

START_TIMEOUT_S = 120.0
START_ATTEMPTS = 2  # a failed start is retried once before it is reported (PoolStartError)
STOP_JOIN_S = 3.0
KILL_JOIN_S = 2.0
REJOIN_TIMEOUT_S = 30.0  # every rank re-joins fresh process groups after a collective timeout, or the pool is killed


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
        self._calls: list = []  # per rank: (position, inside) of its last collective (harness.ranks.deadlock)
        self._tmpdir: str | None = None
        self.jobs_run = 0  # jobs posted since the last (re)spawn: the first one pays the ranks' imports
        self._rejoins = 0  # process-group re-joins after collective timeouts (names each new rendezvous)
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
            _, errors, stuck, _ = self._collect(START_TIMEOUT_S)
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
        gave up waiting in a collective, or were proven stuck in one a
        finished peer never issued) or ``RankHang`` (a rank still busy at the
        parent's deadline); the pool is respawned by the next call whenever a
        failure left it inconsistent.
        """
        if tp * cp != self.world_size:
            raise ValueError(f"tp={tp} x cp={cp} = {tp * cp} must equal the pool's world_size={self.world_size}")
        self.start()
        blob = pickle.dumps(("job", fn, payload, tp, cp, float(timeout_s)), protocol=PICKLE_PROTOCOL)
        for last, calls in zip(self._last, self._calls):
            last.value = b""
            calls[deadlock.POSITION], calls[deadlock.INSIDE] = 0, 0
        self._post(blob)
        self.jobs_run += 1
        posted = time.monotonic()
        results, errors, stuck, stranded = self._collect(timeout_s + GRACE_S, deadlock.Watch())
        stuck_at = {rank: self._last_collective(rank) for rank in sorted(stuck)}
        where = rank_errors.layout(self.world_size, fn, tp, cp)
        if stranded:
            self._reap(0.0)
            waited = time.monotonic() - posted
            hang = CollectiveHang(rank_errors.proven_message(where, list(results), waited, stranded, stuck_at))
            hang.diverged = True
            raise hang
        timed_out = hang_errors(errors)
        last = {rank: self._last_collective(rank) for rank in timed_out}
        if stuck or not self.alive:
            self._reap(0.0)
        elif timed_out:
            self._rejoin_or_reap()
        if len(timed_out) < len(errors):
            raise RankError(rank_errors.error_message(where, errors, stuck_at))
        if timed_out:
            message = rank_errors.timeout_message(where, list(results), timeout_s, timed_out, last, self.alive)
            hang = CollectiveHang("\n".join([message, rank_errors.stuck_lines(stuck_at)]).rstrip())
            hang.diverged = bool(rank_errors.diverged_ranks(list(results), timed_out, last))
            raise hang
        if stuck_at:
            raise RankHang(rank_errors.hang_message(where, self.world_size, timeout_s, stuck_at))
        return [results[rank] for rank in range(self.world_size)]

    def _rejoin_or_reap(self) -> None:
        """After a collective timeout: every rank replied, but gloo closed the groups' pairs.

        On the CPU (gloo) the ranks leave their process groups and join fresh
        ones at a new rendezvous, in well under a second; a respawn would cost
        every rank's torch import again, seconds per hung example on 2 cores.
        Anything short of every rank re-joining, or a GPU backend (NCCL cannot
        be trusted to tear down after a timeout), falls back to killing the
        pool, which the next job respawns.
        """
        if device.device_type() != "cpu":
            self._reap(0.0)
            return
        self._rejoins += 1
        rendezvous = os.path.join(self._tmpdir, f"rendezvous-{self._rejoins}")
        self._post(pickle.dumps(("rejoin", rendezvous), protocol=PICKLE_PROTOCOL))
        _, errors, stuck, _ = self._collect(REJOIN_TIMEOUT_S)
        if errors or stuck or not self.alive:
            self._reap(0.0)

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
        calls = ctx.Array("q", deadlock.CALL_SLOTS, lock=False)
        proc = ctx.Process(
            target=_child_main,
            name=f"lph-rank{rank}of{self.world_size}",
            daemon=True,
            args=(rank, self.world_size, rendezvous, self.pg_timeout_s, child_conn, last, calls, os.getpid()),
        )
        proc.start()
        child_conn.close()
        self._procs.append(proc)
        self._conns.append(parent_conn)
        self._last.append(last)
        self._calls.append(calls)

    def _post(self, blob: bytes) -> None:
        """Send a job to every rank; a rank that died meanwhile is reported by ``_collect`` through its sentinel."""
        for conn in self._conns:
            try:
                conn.send_bytes(blob)
            except OSError:
                pass

    def _collect(self, timeout_s: float, watch: deadlock.Watch | None = None) -> tuple[dict, dict, set, dict]:
        """One reply per rank until the deadline: (results, errors, ranks still pending, ranks proven stuck).

        The first error shortens the deadline to a grace period: the other
        ranks either finish or are stuck in a collective the failed rank
        never joined, and waiting longer would only delay the report. With
        a ``watch``, once some ranks finished without error the others are
        re-read every ``deadlock.POLL_S``, and a proven hang ends the wait.
        """
        results, errors, pending = {}, {}, set(range(self.world_size))
        issued: dict[int, dict] = {}
        deadline = time.monotonic() + timeout_s
        while pending:
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                break
            if watch is not None and results and not errors:
                stranded = watch.observe(now, {rank: self._waiting(rank) for rank in pending}, issued)
                if stranded:
                    return results, errors, pending, stranded
                remaining = min(remaining, deadlock.POLL_S)
            waitables = {self._conns[rank]: rank for rank in pending}
            waitables.update({self._procs[rank].sentinel: rank for rank in pending})
            for ready in mp_connection.wait(list(waitables), timeout=remaining):
                rank = waitables[ready]
                if rank not in pending:
                    continue
                pending.discard(rank)
                status, value, issued[rank] = self._receive(rank)
                if status == "ok":
                    results[rank] = value
                else:
                    errors[rank] = value
                    deadline = min(deadline, time.monotonic() + GRACE_S)
        return results, errors, pending, {}

    def _receive(self, rank: int) -> tuple[str, object, dict]:
        """``(status, value, collectives issued per group)`` of rank ``rank``'s reply.

        The warnings a job reply carries go to ``rank_warnings``; replies to
        a start or a rejoin carry no counts (``{}``).
        """
        conn = self._conns[rank]
        try:
            if conn.poll():
                status, value, *rest = pickle.loads(conn.recv_bytes())
                if rest:
                    rank_warnings.note(rank, rest[0])
                return status, value, rest[1] if len(rest) > 1 else {}
        except (EOFError, OSError):
            pass
        except Exception:
            return "error", "the parent could not unpickle this rank's reply:\n" + traceback.format_exc(), {}
        self._procs[rank].join(KILL_JOIN_S)
        return "error", _exit_description(self._procs[rank].exitcode), {}

    def _last_collective(self, rank: int) -> str:
        text = self._last[rank].value.decode(errors="replace")
        return text or "(no collective issued in this job)"

    def _waiting(self, rank: int) -> deadlock.Waiting:
        """A running rank's shared state: "inside" first, so a call that returns meanwhile reads as not inside."""
        calls = self._calls[rank]
        inside, position = bool(calls[deadlock.INSIDE]), int(calls[deadlock.POSITION])
        return deadlock.Waiting(self._last_collective(rank), position, inside)

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
        self._procs, self._conns, self._last, self._calls = [], [], [], []
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
