"""Self-tests of the collective trace and the cross-rank comparison (docs/bugs.md #5)."""

import pytest

from harness.jobs import selftest
from harness.names import name_of
from harness.ranks.pool import RankHang, RankPool
from harness.ranks.trace import CollectiveRecord, compare_traces, describe


@pytest.fixture(scope="module")
def pool2():
    pool = RankPool(2, pg_timeout_s=10)
    yield pool
    pool.shutdown()


def _fields(records) -> list[tuple]:
    return [(r.op, r.reduce_op, r.group_ranks, r.shape, r.dtype, r.phase) for r in records]


@pytest.mark.slow
def test_forward_and_backward_collectives_are_recorded(pool2):
    """The differentiable all_reduce is recorded, then its inner plain call, then the one its backward issues."""
    traces = pool2.run(name_of(selftest.forward_and_backward_collectives), None, tp=2, cp=1)
    for records in traces:
        assert _fields(records) == [
            ("all_reduce", "MAX", (0, 1), (4, 3), "float32", "forward"),
            ("nn.all_reduce", "SUM", (0, 1), (5,), "float32", "forward"),
            ("all_reduce", "SUM", (0, 1), (5,), "float32", "forward"),
            ("all_reduce", "SUM", (0, 1), (5,), "float32", "backward"),
        ]
    assert compare_traces(dict(enumerate(traces)), [(0, 1)]) == []


@pytest.mark.slow
def test_world_barrier_gather_and_backward_scatter_are_recorded(pool2):
    """group=None resolves to the world; a tensorless call has shape () and no dtype; gloo's nn.all_gather
    backward scatters, recorded as backward; a second install() does not double-record."""
    traces = pool2.run(name_of(selftest.assorted_collectives), None, tp=2, cp=1)
    for records in traces:
        assert _fields(records) == [
            ("barrier", "", (0, 1), (), "", "forward"),
            ("all_gather_into_tensor", "", (0, 1), (4, 2), "float32", "forward"),
            ("nn.all_gather", "", (0, 1), (3,), "float32", "forward"),
            ("all_gather", "", (0, 1), (3,), "float32", "forward"),
            ("scatter", "", (0, 1), (3,), "float32", "backward"),
            ("scatter", "", (0, 1), (3,), "float32", "backward"),
        ]


@pytest.mark.slow
def test_collective_on_one_rank_hangs_and_is_named(pool2):
    """A throwaway mutant of the hang class: only rank 0 issues the differentiable all-reduce."""
    with pytest.raises(RankHang) as info:
        pool2.run(name_of(selftest.backward_collective_on_rank0), None, tp=2, cp=1, timeout_s=3)
    assert "rank 0 stuck; last collective: all_reduce[SUM] group=(0, 1) shape=(3,) float32 forward" in str(info.value)


def _record(op="all_reduce", phase="forward", shape=(2,), group=(0, 1)):
    return CollectiveRecord(op=op, group_ranks=group, shape=shape, dtype="float32", phase=phase, reduce_op="SUM")


def test_describe():
    expected = "all_reduce[SUM] group=(0, 1) shape=(4, 3) float32 backward"
    assert describe(_record(shape=(4, 3), phase="backward")) == expected
    assert describe(CollectiveRecord("barrier", (0, 1), (), "", "forward")) == "barrier group=(0, 1) shape=() forward"
    assert describe(None) == "(no collective issued)"


def test_compare_traces_accepts_consistent_traces():
    trace = [_record(), _record(group=(0, 2)), _record(phase="backward")]
    assert compare_traces({0: trace, 1: list(trace)}, [(0, 1)]) == []


def test_compare_traces_names_first_divergence():
    traces = {0: [_record(), _record(phase="backward")], 1: [_record(), _record(shape=(3,), phase="backward")]}
    (problem,) = compare_traces(traces, [(0, 1)])
    assert problem.startswith("group (0, 1): rank 0 and rank 1 diverge at collective #1:")
    assert "rank 0 issued all_reduce[SUM] group=(0, 1) shape=(2,) float32 backward" in problem
    assert "rank 1 issued all_reduce[SUM] group=(0, 1) shape=(3,) float32 backward" in problem


def test_compare_traces_names_missing_collective():
    (problem,) = compare_traces({0: [_record()], 1: []}, [(0, 1)])
    assert "collective #0" in problem and "sequence ended" in problem and "1 vs 0" in problem


def test_compare_traces_projects_each_group():
    """Records on other groups are ignored; each group is checked on its own members only."""
    traces = {
        0: [_record(), _record(group=(0, 2))],
        1: [_record()],
        2: [_record(group=(0, 2), shape=(5,))],
    }
    (problem,) = compare_traces(traces, [(0, 1), (0, 2)])
    assert problem.startswith("group (0, 2): rank 0 and rank 2 diverge at collective #0")
