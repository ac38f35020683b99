"""Self-tests of the rank pool: layouts, failures named by rank, hangs contained, nothing left behind."""

import multiprocessing
import os
import time

import pytest

from harness.pool import RankError, RankHang, RankPool, factorisations

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pool2():
    pool = RankPool(2, pg_timeout_s=10)
    yield pool
    pool.shutdown()


@pytest.mark.parametrize("world", [2, 4])
def test_every_factorisation_gets_megatron_groups(world):
    pool = RankPool(world)
    try:
        for tp, cp in factorisations(world):
            results = pool.run("harness.selftest_jobs:whoami", "hi", tp=tp, cp=cp)
            for rank, result in enumerate(results):
                assert (result["rank"], result["tp_rank"], result["cp_rank"]) == (rank, rank % tp, rank // tp)
                first = (rank // tp) * tp
                assert result["tp_sum"] == sum(range(first, first + tp))
                assert result["payload"] == "hi"
    finally:
        pool.shutdown()


def test_layout_must_match_world(pool2):
    with pytest.raises(ValueError, match="world_size=2"):
        pool2.run("harness.selftest_jobs:whoami", None, tp=2, cp=2)


def test_raising_rank_is_named_and_pool_survives(pool2):
    with pytest.raises(RankError, match=r"rank\(s\) \[1\][\s\S]*ValueError: planted failure on rank 1"):
        pool2.run("harness.selftest_jobs:raise_on", {"rank": 1}, tp=2, cp=1)
    assert [r["rank"] for r in pool2.run("harness.selftest_jobs:whoami", None, tp=2, cp=1)] == [0, 1]


def test_skipped_collective_fails_fast_naming_stuck_rank(pool2):
    start = time.monotonic()
    with pytest.raises(RankHang, match=r"rank 0 stuck; last collective: all_reduce\[SUM\] group=\(0, 1\)"):
        pool2.run("harness.selftest_jobs:skip_collective", {"rank": 1}, tp=2, cp=1, timeout_s=3)
    elapsed = time.monotonic() - start
    print(f"hang detected and pool killed in {elapsed:.1f} s")
    assert [r["rank"] for r in pool2.run("harness.selftest_jobs:whoami", None, tp=2, cp=1)] == [0, 1]


def test_dying_rank_is_named_and_pool_respawns(pool2):
    with pytest.raises(RankError, match="exited with code 3"):
        pool2.run("harness.selftest_jobs:die_on", {"rank": 1}, tp=2, cp=1)
    assert pool2.run("harness.selftest_jobs:die_on", {"rank": -1}, tp=2, cp=1) == [0, 1]


def test_many_small_jobs(pool2):
    start = time.monotonic()
    for i in range(100):
        assert [r["payload"] for r in pool2.run("harness.selftest_jobs:whoami", i, tp=1, cp=2)] == [i, i]
    print(f"{100 / (time.monotonic() - start):.0f} jobs/s")


def test_shutdown_leaves_no_process():
    pool = RankPool(2)
    pool.run("harness.selftest_jobs:whoami", None, tp=2, cp=1)
    pids = pool.pids
    pool.shutdown()
    assert not [p for p in multiprocessing.active_children() if p.pid in pids]
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"rank process {pid} outlived shutdown"
