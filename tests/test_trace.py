"""Self-tests of the collective trace and the cross-rank comparison (BUGS.md #5)."""

import pytest

from harness.pool import RankPool
from harness.trace import CollectiveRecord, compare_traces


@pytest.fixture(scope="module")
def pool2():
    pool = RankPool(2, pg_timeout_s=10)
    yield pool
    pool.shutdown()


@pytest.mark.slow
def test_forward_and_backward_collectives_are_recorded(pool2):
    traces = pool2.run("harness.selftest_jobs:forward_and_backward_collectives", None, tp=2, cp=1)
    for records in traces:
        assert [(r.op, r.reduce_op, r.group_ranks, r.shape, r.dtype, r.phase) for r in records] == [
            ("all_reduce", "MAX", (0, 1), (4, 3), "float32", "forward"),
            ("nn.all_reduce", "SUM", (0, 1), (5,), "float32", "forward"),
            ("all_reduce", "SUM", (0, 1), (5,), "float32", "backward"),
        ]
    assert compare_traces(dict(enumerate(traces)), [(0, 1)]) == []


@pytest.mark.slow
def test_backward_collective_on_one_rank_is_caught(pool2):
    """The throwaway mutant of issue 3: rank 0 alone all-reduces; caught from the trace, before any hang."""
    with pytest.raises(Exception) as info:
        traces = pool2.run("harness.selftest_jobs:backward_collective_on_rank0", None, tp=2, cp=1, timeout_s=5)
        problems = compare_traces(dict(enumerate(traces)), [(0, 1)])
        assert not problems, "\n".join(problems)
    assert "rank 0" in str(info.value)


def _record(op="all_reduce", phase="forward", shape=(2,)):
    return CollectiveRecord(op=op, group_ranks=(0, 1), shape=shape, dtype="float32", phase=phase, reduce_op="SUM")


def test_compare_traces_names_first_divergence():
    traces = {0: [_record(), _record(phase="backward")], 1: [_record(), _record(shape=(3,), phase="backward")]}
    (problem,) = compare_traces(traces, [(0, 1)])
    assert "collective #1" in problem and "shape=(2,)" in problem and "shape=(3,)" in problem


def test_compare_traces_names_missing_collective():
    (problem,) = compare_traces({0: [_record()], 1: []}, [(0, 1)])
    assert "sequence ended" in problem and "1 vs 0" in problem


def test_compare_traces_ignores_other_groups():
    other = CollectiveRecord("all_reduce", (2, 3), (1,), "float32", "forward")
    assert compare_traces({0: [_record(), other], 1: [_record()]}, [(0, 1)]) == []
