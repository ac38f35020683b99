"""A hang-class bug costs seconds. Deadlines from measured cost, verdict kinds, the hang memo and budget.

These tests assert behaviour (which exception, how many examples waited out
a deadline), never wall times: speed is measured by bench/failure_timing.py.
The injected failures are the adapters of tests/fakes/failure_targets.py.
"""

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.checks.policy import check_policy_loss
from harness.ranks import deadline, hang_memo
from harness.ranks.errors import hang_errors, is_collective_timeout
from harness.ranks.pool import CollectiveHang, RankError, RankHang, get_pool

STAND_INS = "tests/fakes/failure_targets.py"
CASE = Case(seed=3, vocab=8, tp=2, samples=((5, 3),), entropy_coef=0.01)


@pytest.fixture
def short_deadline(monkeypatch):
    """Every pool job gets 3 s: these tests are about verdicts and counts, not about sizing deadlines."""
    monkeypatch.setattr(deadline.POLICY, "deadline", lambda shape: 3.0)


def test_deadline_follows_measured_cost_within_floor_and_ceiling(monkeypatch):
    monkeypatch.setattr(deadline, "contention", lambda: 1.0)  # a quiet machine
    policy = deadline.DeadlinePolicy()
    small = deadline.shape_of("m:job", 2, 1, rows=10, vocab=16)
    other = deadline.shape_of("m:job", 1, 2, rows=10, vocab=16)
    assert policy.deadline(small) == deadline.COLD_S, "nothing observed yet: the cold default"
    policy.observe(small, 0.01)
    assert policy.deadline(small) == deadline.FLOOR_S, "a millisecond job gets the floor, not the ceiling"
    assert deadline.FLOOR_S <= policy.deadline(other) <= deadline.COLD_S
    policy.observe(small, 2.0)
    assert policy.deadline(small) == pytest.approx(deadline.MULTIPLIER * 2.0)
    policy.observe(small, 100.0)
    assert policy.deadline(small) == deadline.CEILING_S
    bigger = deadline.shape_of("m:job", 2, 1, rows=1000, vocab=16)
    assert bigger != small, "a case 100x larger is another shape"


def test_an_unseen_shape_is_sized_by_its_own_job_not_by_the_slowest_job_of_the_process(monkeypatch):
    """One slow job of another function must not put every unseen shape at the cold cap."""
    monkeypatch.setattr(deadline, "contention", lambda: 1.0)
    policy = deadline.DeadlinePolicy()
    policy.observe(deadline.shape_of("m:hidden_job", 2, 1, rows=4096, vocab=4096), 3.0)  # a slow, big job
    policy.observe(deadline.shape_of("m:token_job", 2, 1, rows=10, vocab=16), 0.01)
    unseen_layout = deadline.shape_of("m:token_job", 4, 1, rows=10, vocab=16)
    assert policy.deadline(unseen_layout) == deadline.FLOOR_S, "a millisecond job's sibling gets the floor"
    one_bucket_up = deadline.shape_of("m:token_job", 2, 1, rows=80, vocab=16)
    expected = deadline.MULTIPLIER * deadline.UNSEEN_SHAPE_FACTOR * 0.01 * 8
    assert policy.deadline(one_bucket_up) == max(deadline.FLOOR_S, expected)
    policy.observe(deadline.shape_of("m:token_job", 2, 1, rows=10, vocab=16), 0.2)
    assert policy.deadline(one_bucket_up) == deadline.COLD_S, "a larger bucket is scaled up by 8 per bucket"
    never_ran = deadline.shape_of("m:policy_job", 2, 1, rows=10, vocab=16)
    assert policy.deadline(never_ran) == deadline.COLD_S, "a job never seen: the slowest job of any kind"


def test_floor_scales_with_the_machine_load(monkeypatch):
    """A crowded machine (load 6 per core) waits 6x longer before calling a millisecond job hung."""
    policy = deadline.DeadlinePolicy()
    small = deadline.shape_of("m:job", 2, 1, rows=10, vocab=16)
    policy.observe(small, 0.01)
    monkeypatch.setattr(deadline.os, "getloadavg", lambda: (12.0, 0.0, 0.0))
    monkeypatch.setattr(deadline.os, "cpu_count", lambda: 2)
    assert deadline.contention() == 6.0
    assert policy.deadline(small) == 6 * deadline.FLOOR_S
    monkeypatch.setattr(deadline.os, "getloadavg", lambda: (0.5, 0.0, 0.0))
    assert policy.deadline(small) == deadline.FLOOR_S, "an idle machine never shortens the floor"


def test_collective_timeout_is_recognised():
    gloo = "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation"
    assert is_collective_timeout("Traceback ...\n" + gloo)
    assert not is_collective_timeout("Traceback ...\nValueError: planted failure on rank 1")
    assert issubclass(CollectiveHang, RankHang)


@pytest.mark.slow
@pytest.mark.parametrize(
    "adapter, verdict",
    [
        ("WrongValue", AssertionError),
        ("RaiseOnRank1", RankError),
        ("KillRank1", RankError),
        ("HangForward", RankHang),
        ("HangBackward", RankHang),
    ],
)
def test_each_failure_class_gets_its_verdict(adapter, verdict, short_deadline):
    with pytest.raises(verdict) as info:
        check_policy_loss(CASE, f"{STAND_INS}:{adapter}")
    if verdict is RankHang:
        assert "rank 0 stuck; last collective: all_reduce" in str(info.value), str(info.value)
        assert any(note.startswith("Replay: ") for note in info.value.__notes__)
    if verdict is RankError:
        assert not isinstance(info.value, RankHang)


@pytest.mark.slow
def test_known_hang_is_replayed_from_the_memo_without_running(short_deadline):
    target = f"{STAND_INS}:HangForward"
    with pytest.raises(RankHang) as first:
        check_policy_loss(CASE, target)
    pool = get_pool(CASE.world_size)
    jobs_run = pool.jobs_run
    with pytest.raises(RankHang) as again:
        check_policy_loss(CASE, target)
    assert type(again.value) is type(first.value) and str(again.value) == str(first.value)
    assert hang_memo.current().skipped_runs == 1
    assert pool.jobs_run == jobs_run, "the memo hit ran nothing: no job reached the pool"


@pytest.mark.slow
def test_a_hang_is_not_shrunk_one_deadline_is_waited(short_deadline):
    target = f"{STAND_INS}:HangForward"

    @settings(max_examples=20, derandomize=True, database=None, phases=[Phase.generate, Phase.shrink])
    @given(seed=st.integers(0, 1000))
    def every_example_hangs(seed):
        check_policy_loss(CASE.with_(seed=seed), target)

    with pytest.raises(RankHang):
        every_example_hangs()
    hung = len(hang_memo.current().hung)
    assert hung == 1, f"deadline waits: {hung}; no other example may run after a hang"
    assert hang_memo.current().skipped_runs >= 1, "Hypothesis' final replay must hit the memo"


def test_a_pair_closed_by_a_timed_out_peer_is_part_of_the_hang():
    """One rank's timeout closes its pairs; a peer then fails with 'Connection closed by peer': still the hang."""
    timeout = "Traceback ...\nRuntimeError: [gloo/unbound_buffer.cc:78] Timed out waiting 8000ms for recv operation"
    closed = "Traceback ...\nRuntimeError: [gloo/pair.cc:553] Connection closed by peer [127.0.0.1]:16291."
    planted = "Traceback ...\nValueError: planted failure on rank 1"
    assert hang_errors({0: timeout, 1: closed}) == {0: timeout, 1: closed}
    assert hang_errors({0: timeout, 1: planted}) == {0: timeout}, "a real exception stays the rank's own"
    assert hang_errors({0: closed}) == {}, "no timeout anywhere: a dead peer closed the pair, not a hang"
