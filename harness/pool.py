"""A persistent pool of gloo rank processes per world size.

Spawning ranks costs about a second each, so one pool per world size is
started once per test session and then runs a job in milliseconds. Design:

* spawn start method, ``OMP_NUM_THREADS=1``, gloo with a short process-group
  timeout, ``file://`` rendezvous in a fresh temp dir per start (parallel
  pytest-xdist workers and respawns never collide, no ports involved);
* every (tp, cp) factorisation of the world gets its TP and CP groups at
  start-up, in Megatron order (``rank = cp_rank * tp + tp_rank``);
* a job is an importable ``'module:function'`` called on every rank with the
  payload and a RankContext; payloads and results cross as pickled bytes (plain
  pickle, so tensors travel by value, not as shared-memory file descriptors);
* the PARENT enforces a deadline: a hung rank becomes ``RankHang`` naming the
  stuck rank and the last collective it issued (mirrored into shared memory
  by the collective tracer before each call), a raising or dying rank becomes
  ``RankError`` with its traceback; either way a broken pool is killed and
  transparently respawned by the next job, so one bad example never hangs CI
  or poisons the next test;
* ranks exit when the parent dies (a watchdog thread), and ``shutdown_all``
  (registered with atexit) leaves no process behind.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import pickle
import shutil
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta

GRACE_S = 2.0
START_TIMEOUT_S = 120.0
LAST_COLLECTIVE_BYTES = 512


class RankError(RuntimeError):
    """One or more ranks raised or died while running a job."""


class RankHang(RuntimeError):
    """One or more ranks did not finish a job before its deadline."""


@dataclass
class RankContext:
    """What a job knows about its rank: position, TP/CP groups, and the collective tracer."""

    rank: int
    world_size: int
    tp: int
    cp: int
    tp_rank: int
    cp_rank: int
    tp_group: object
    cp_group: object
    tracer: object


def factorisations(world_size: int) -> list[tuple[int, int]]:
    """Every (tp, cp) with tp * cp == world_size."""
    return [(tp, world_size // tp) for tp in range(1, world_size + 1) if world_size % tp == 0]


def layout_groups(world_size: int, tp: int, cp: int) -> tuple[list[tuple], list[tuple]]:
    """TP groups (consecutive ranks) and CP groups (equal tp_rank) of one factorisation."""
    tp_groups = [tuple(c * tp + t for t in range(tp)) for c in range(cp)]
    cp_groups = [tuple(c * tp + t for c in range(cp)) for t in range(tp)]
    return tp_groups, cp_groups


# ---- child side ---------------------------------------------------------------


def _exit_when_orphaned(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(0.5)


def _make_groups(world_size: int):
    import torch.distributed as dist

    groups = {}
    for tp, cp in factorisations(world_size):
        tp_groups, cp_groups = layout_groups(world_size, tp, cp)
        for ranks in tp_groups + cp_groups:
            if ranks not in groups:
                groups[ranks] = dist.new_group(list(ranks))
    return groups


def _child_main(rank, world_size, rendezvous, pg_timeout_s, conn, last_collective, parent_pid):
    os.environ["OMP_NUM_THREADS"] = "1"
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    import torch
    import torch.distributed as dist

    from harness.trace import CollectiveTracer, describe

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=pg_timeout_s),
    )

    def mirror(record):
        last_collective.value = describe(record).encode()[: LAST_COLLECTIVE_BYTES - 1]

    tracer = CollectiveTracer(on_record=mirror).install()
    groups = _make_groups(world_size)
    functions = {}
    conn.send_bytes(pickle.dumps(("ready", rank)))
    while True:
        message = pickle.loads(conn.recv_bytes())
        if message[0] == "stop":
            break
        _, fn_path, payload, tp, cp = message
        tracer.reset()
        last_collective.value = b""
        try:
            if fn_path not in functions:
                module_name, _, function_name = fn_path.partition(":")
                functions[fn_path] = getattr(importlib.import_module(module_name), function_name)
            tp_rank, cp_rank = rank % tp, rank // tp
            tp_groups, cp_groups = layout_groups(world_size, tp, cp)
            ctx = RankContext(
                rank,
                world_size,
                tp,
                cp,
                tp_rank,
                cp_rank,
                groups[tp_groups[cp_rank]],
                groups[cp_groups[tp_rank]],
                tracer,
            )
            reply = ("ok", functions[fn_path](payload, ctx))
            blob = pickle.dumps(reply, protocol=5)
        except BaseException:
            blob = pickle.dumps(("error", traceback.format_exc()))
        conn.send_bytes(blob)
    dist.destroy_process_group()


# ---- parent side ---------------------------------------------------------------


class RankPool:
    """``world_size`` persistent gloo ranks; see the module docstring."""

    def __init__(self, world_size: int, *, pg_timeout_s: float = 20.0):
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self.pg_timeout_s = pg_timeout_s
        self._procs: list = []
        self._conns: list = []
        self._last: list = []
        self._tmpdir: str | None = None

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self._tmpdir = tempfile.mkdtemp(prefix="lph-pool-")
        rendezvous = os.path.join(self._tmpdir, "rendezvous")
        previous = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            for rank in range(self.world_size):
                parent_conn, child_conn = ctx.Pipe()
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
        finally:
            if previous is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = previous
        deadline = time.monotonic() + START_TIMEOUT_S
        for rank, conn in enumerate(self._conns):
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                self.shutdown()
                raise RankHang(
                    f"rank {rank} of a world of {self.world_size} did not start within {START_TIMEOUT_S:.0f} s"
                )
            pickle.loads(conn.recv_bytes())

    def _last_collective(self, rank: int) -> str:
        text = self._last[rank].value.decode(errors="replace")
        return text or "(no collective issued in this job)"

    def run(self, fn: str, payload, *, tp: int, cp: int, timeout_s: float = 60.0) -> list:
        """Run ``fn(payload, ctx)`` on every rank; one result per rank, in rank order."""
        if tp * cp != self.world_size:
            raise ValueError(f"tp={tp} x cp={cp} must equal the pool's world_size={self.world_size}")
        if not self.alive:
            self.shutdown()
            self._start()
        blob = pickle.dumps(("job", fn, payload, tp, cp), protocol=5)
        for conn in self._conns:
            conn.send_bytes(blob)
        results, errors, pending = [None] * self.world_size, {}, set(range(self.world_size))
        deadline = time.monotonic() + timeout_s
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            waitables = {self._conns[r]: r for r in pending}
            waitables.update({self._procs[r].sentinel: r for r in pending})
            for ready in mp_connection.wait(list(waitables), timeout=remaining):
                rank = waitables[ready]
                if rank not in pending:
                    continue
                pending.discard(rank)
                try:
                    status, value = (
                        pickle.loads(self._conns[rank].recv_bytes())
                        if ready is self._conns[rank] or self._conns[rank].poll()
                        else ("died", None)
                    )
                except (EOFError, OSError):
                    status, value = "died", None
                if status == "ok":
                    results[rank] = value
                    continue
                if status == "died":
                    self._procs[rank].join(1.0)
                    value = f"rank process exited with code {self._procs[rank].exitcode}"
                errors[rank] = value
                deadline = min(deadline, time.monotonic() + GRACE_S)
        if pending or any(not p.is_alive() for p in self._procs):
            stuck = {rank: self._last_collective(rank) for rank in sorted(pending)}
            self.shutdown()
        else:
            stuck = {}
        if errors:
            raise RankError(self._error_message(fn, errors, stuck))
        if stuck:
            lines = [f"rank {rank} stuck; last collective: {last}" for rank, last in stuck.items()]
            raise RankHang(
                f"job {fn} did not finish within {timeout_s:.1f} s on a world of {self.world_size} "
                f"(tp={tp}, cp={cp}):\n" + "\n".join(lines) + "\nthe pool was killed and will respawn"
            )
        return results

    def _error_message(self, fn: str, errors: dict, stuck: dict) -> str:
        parts = [f"job {fn} failed on rank(s) {sorted(errors)} of a world of {self.world_size}"]
        for rank, text in sorted(errors.items()):
            parts.append(f"--- rank {rank} ---\n{text}")
        for rank, last in stuck.items():
            parts.append(f"rank {rank} was left waiting; last collective: {last}")
        return "\n".join(parts)

    def shutdown(self) -> None:
        """Stop the ranks (politely, then by force) and remove the rendezvous directory."""
        for proc, conn in zip(self._procs, self._conns):
            if proc.is_alive():
                try:
                    conn.send_bytes(pickle.dumps(("stop",)))
                except (OSError, ValueError):
                    pass
        for proc in self._procs:
            proc.join(2.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns, self._last = [], [], []
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


_POOLS: dict[int, RankPool] = {}


def get_pool(world_size: int) -> RankPool:
    """The session's pool for ``world_size`` (created on first use)."""
    if world_size not in _POOLS:
        _POOLS[world_size] = RankPool(world_size)
    return _POOLS[world_size]


def shutdown_all() -> None:
    for pool in _POOLS.values():
        pool.shutdown()
    _POOLS.clear()


atexit.register(shutdown_all)
