"""Self-tests of the rank pool: Megatron layouts, failures named by rank, hangs contained, nothing left behind.

Jobs live in an importable module (harness/jobs/selftest.py) because spawned
ranks import them by name.
One world-2 pool serves the whole module; the failure tests also check that
it respawns by itself.
"""

import multiprocessing
import os
import time

import pytest

from harness.jobs import selftest
from harness.names import name_of
from harness.ranks import pool as pool_module
from harness.ranks.deadlock import HOLD_S
from harness.ranks.errors import DIVERGED
from harness.ranks.pool import (
    CollectiveHang,
    PoolStartError,
    RankError,
    RankHang,
    RankPool,
    get_pool,
    shutdown_all,
)
from harness.ranks.process import factorisations, layout_groups

pytestmark = pytest.mark.slow

WHOAMI = name_of(selftest.whoami)


@pytest.fixture(scope="module")
def pool2():
    pool = RankPool(2, pg_timeout_s=10)
    yield pool
    pool.shutdown()


def _ranks(pool: RankPool) -> list[int]:
    return [result["rank"] for result in pool.run(WHOAMI, None, tp=2, cp=1)]


def test_factorisations_and_megatron_layout():
    assert factorisations(1) == [(1, 1)]
    assert factorisations(2) == [(1, 2), (2, 1)]
    assert factorisations(4) == [(1, 4), (2, 2), (4, 1)]
    assert layout_groups(4, 2, 2) == ([(0, 1), (2, 3)], [(0, 2), (1, 3)])
    assert layout_groups(4, 4, 1) == ([(0, 1, 2, 3)], [(0,), (1,), (2,), (3,)])


def _check_every_factorisation(pool: RankPool, world: int) -> None:
    for tp, cp in factorisations(world):
        results = pool.run(WHOAMI, "hi", tp=tp, cp=cp)
        for rank, result in enumerate(results):
            assert (result["rank"], result["tp_rank"], result["cp_rank"]) == (rank, rank % tp, rank // tp)
            first = (rank // tp) * tp
            assert result["tp_sum"] == sum(range(first, first + tp)), "all_reduce over the TP group"
            assert result["payload"] == "hi"


def test_every_factorisation_world2(pool2):
    _check_every_factorisation(pool2, 2)


def test_every_factorisation_world4():
    pool = RankPool(4, pg_timeout_s=10)
    try:
        _check_every_factorisation(pool, 4)
    finally:
        pool.shutdown()


def test_layout_must_match_world(pool2):
    with pytest.raises(ValueError, match=r"tp=2 x cp=2 = 4 must equal the pool's world_size=2"):
        pool2.run(WHOAMI, None, tp=2, cp=2)


def test_raising_rank_is_named_and_pool_survives(pool2):
    _ranks(pool2)
    pids = pool2.pids
    with pytest.raises(RankError, match=r"rank\(s\) \[1\][\s\S]*ValueError: planted failure on rank 1") as info:
        pool2.run(name_of(selftest.raise_on), {"rank": 1}, tp=2, cp=1)
    # Verdict tables show the first line only: it must carry the rank's exception.
    assert (
        str(info.value).splitlines()[0].endswith("failed on rank(s) [1]: rank 1: ValueError: planted failure on rank 1")
    )
    assert pool2.pids == pids, "a clean failure (no rank left stuck) must not cost a respawn"
    assert _ranks(pool2) == [0, 1]


def test_raising_rank_with_stuck_peer_names_both(pool2):
    with pytest.raises(RankError) as info:
        pool2.run(name_of(selftest.raise_while_peer_waits), {"rank": 1}, tp=2, cp=1, timeout_s=30)
    message = str(info.value)
    assert "rank(s) [1]" in message and "ValueError: planted failure on rank 1" in message
    assert "rank 0 stuck; last collective: broadcast group=(0, 1) shape=(2,) float32 forward" in message
    assert not pool2.alive
    assert _ranks(pool2) == [0, 1]


def test_skipped_collective_is_proven_hung_before_the_deadline(pool2):
    """Rank 1 finished without the all_reduce rank 0 is inside: a hang by proof, not by a 60 s timeout.

    Only the proof writes its last lines; a timeout would also fail this
    test, after the deadline, on the missing proof line.
    """
    _ranks(pool2)
    with pytest.raises(CollectiveHang) as info:
        pool2.run(name_of(selftest.skip_collective), {"rank": 1}, tp=2, cp=1, timeout_s=60)
    message = str(info.value)
    print(message.splitlines()[0])
    assert DIVERGED in message.splitlines()[0] and info.value.diverged
    assert "rank 0 stuck; last collective: all_reduce[SUM] group=(0, 1) shape=(3,) float32 forward" in message
    assert "finished: rank(s) [1]" in message
    assert "rank 0 is inside its collective #1 on group (0, 1): rank 1 finished the job after 0 there" in message
    assert not pool2.alive, "the stuck rank cannot be reused: the pool is killed"
    assert _ranks(pool2) == [0, 1]


def test_a_finished_peer_proves_nothing_while_the_other_rank_computes(pool2):
    """Both ranks joined the all_reduce; rank 0 then computes past the proof's hold time: no hang."""
    assert pool2.run(name_of(selftest.finish_then_peer_computes), {"seconds": HOLD_S + 0.5}, tp=2, cp=1) == [0, 1]


def test_a_rank_no_longer_inside_its_collective_is_never_proven_stuck(pool2):
    """Rank 1's untraced join leaves its count short of rank 0's position; rank 0 has left the call: no hang."""
    job = name_of(selftest.untraced_peer_then_compute)
    assert pool2.run(job, {"seconds": HOLD_S + 0.5}, tp=2, cp=1) == [0, 1]


def test_ranks_waiting_in_different_groups_time_out_at_the_deadline_naming_both(pool2):
    """No rank finishes, so nothing is proven: each rank's group timeout ends the wait, a grace later at most."""
    _ranks(pool2)
    start = time.monotonic()
    with pytest.raises(RankHang) as info:
        pool2.run(name_of(selftest.cross_wait), None, tp=2, cp=1, timeout_s=3)
    elapsed = time.monotonic() - start
    print(f"hang reported in {elapsed:.1f} s")
    message = str(info.value)
    assert "rank 0 stuck; last collective: all_reduce[SUM] group=(0, 1) shape=(3,) float32 forward" in message
    assert "rank 1 stuck; last collective: all_reduce[SUM] group=(0, 1) shape=(3,) float32 forward" in message
    assert isinstance(info.value, CollectiveHang), "the waiting ranks must raise by themselves (their groups' timeout)"
    assert not info.value.diverged, "no rank finished: nothing proves the sequences differ"
    assert elapsed < 10, f"a 3 s deadline took {elapsed:.1f} s to report"


def test_collective_timeout_rejoins_fresh_groups_without_a_respawn(pool2):
    """gloo closes a group's pairs after a timeout: the ranks join fresh groups, the processes stay."""
    _ranks(pool2)
    pids = pool2.pids
    with pytest.raises(CollectiveHang, match=r"the ranks joined fresh process groups \(no respawn\)"):
        pool2.run(name_of(selftest.cross_wait), None, tp=2, cp=1, timeout_s=3)
    assert pool2.alive and pool2.pids == pids, "a collective timeout must not cost a respawn on gloo"
    _check_every_factorisation(pool2, 2)  # every group works again, world and subgroups
    with pytest.raises(CollectiveHang):  # and a second timeout on the re-joined groups is handled alike
        pool2.run(name_of(selftest.cross_wait), None, tp=2, cp=1, timeout_s=3)
    assert pool2.pids == pids
    assert _ranks(pool2) == [0, 1]


def test_a_failed_rejoin_falls_back_to_a_respawn(pool2, monkeypatch):
    _ranks(pool2)
    pids = pool2.pids
    monkeypatch.setattr(pool_module, "REJOIN_TIMEOUT_S", 0.0)  # no rank can answer the rejoin in time
    with pytest.raises(CollectiveHang, match="the pool was killed and will respawn on the next job"):
        pool2.run(name_of(selftest.cross_wait), None, tp=2, cp=1, timeout_s=3)
    assert not pool2.alive, "ranks that did not re-join are killed, never reused"
    assert _ranks(pool2) == [0, 1] and pool2.pids != pids


def test_dying_rank_is_named_and_pool_respawns(pool2):
    with pytest.raises(RankError, match=r"rank\(s\) \[1\][\s\S]*--- rank 1 ---\nrank process exited with code 3"):
        pool2.run(name_of(selftest.die_on), {"rank": 1}, tp=2, cp=1)
    assert pool2.run(name_of(selftest.die_on), {"rank": -1}, tp=2, cp=1) == [0, 1]


def test_many_small_jobs(pool2):
    _ranks(pool2)
    count = 100
    start = time.monotonic()
    for i in range(count):
        assert [r["payload"] for r in pool2.run(WHOAMI, i, tp=1, cp=2)] == [i, i]
    print(f"{count / (time.monotonic() - start):.0f} jobs/s (world 2)")


def test_pool_that_cannot_start_is_retried_then_reported_as_infrastructure(monkeypatch):
    """A start the machine could not make (here: no rank can be ready within 1 ms) is retried once,
    then raised as PoolStartError, which the gate reads as ERROR, not as the check's FAIL."""
    monkeypatch.setattr(pool_module, "START_TIMEOUT_S", 0.001)
    spawned = []
    pool = RankPool(2)
    real_spawn = pool._spawn
    monkeypatch.setattr(pool, "_spawn", lambda: (spawned.append(1), real_spawn()))
    try:
        with pytest.raises(PoolStartError, match=r"world size 2 failed to start \(2 attempts\)"):
            pool.run(WHOAMI, None, tp=2, cp=1)
        assert len(spawned) == pool_module.START_ATTEMPTS == 2
        assert not pool.alive
    finally:
        pool.shutdown()


def test_get_pool_caches_one_lazy_pool_per_world_size():
    assert get_pool(2) is get_pool(2)
    assert get_pool(2) is not get_pool(4)
    assert get_pool(4).pids == [], "a pool starts on its first job, not on creation"


def test_shutdown_all_leaves_no_process(pool2):
    _ranks(pool2)
    pids = pool2.pids
    shutdown_all()
    assert not pool2.alive
    assert not [p for p in multiprocessing.active_children() if p.pid in pids]
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"rank process {pid} outlived shutdown_all (running or zombie)"
