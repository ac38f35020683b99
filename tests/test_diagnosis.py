"""Diagnosis by ablation and warnings as evidence (harness/checks/diagnosis.py, harness/ranks/rank_warnings.py).

The logic is shown on small fake checks (what fails is known exactly); the
acceptance on the two stand-in targets of tests/fakes/failure_targets.py,
through the rank pool: a backward without the entropy term needs the entropy
gradient, a hidden path without the TP all-reduce needs tp >= 2 and carries
torch's own warning from both ranks.
"""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.checks import diagnosis, record
from harness.checks.hidden import check_hidden_backward
from harness.checks.parity import check_token_backward, replayable
from harness.ranks import rank_warnings
from harness.ranks.errors import RankHang

FAKES = "tests/fakes/failure_targets.py:"
BASE = Case(seed=1, vocab=8, tp=2, samples=((5, 3), (4, 2)), chunk_size=2, dtype="bfloat16", temperature=0.7)

CALLS: list[Case] = []


@replayable
def fails_at_tp2_in_bf16(case: Case, spec: str = "impl") -> None:
    CALLS.append(case)
    assert not (case.tp > 1 and case.dtype == "bfloat16"), "defect at tp >= 2 in bf16"


@replayable
def raises_otherwise_at_tp1(case: Case, spec: str = "impl") -> None:
    CALLS.append(case)
    if case.tp == 1:
        raise ValueError("a different failure")
    raise AssertionError("defect")


@replayable
def precondition_then_defect(case: Case, spec: str = "impl") -> None:
    CALLS.append(case)
    assert case.tp > 1, "this check needs tp > 1"
    raise AssertionError("defect")


@replayable
def hangs(case: Case, spec: str = "impl") -> None:
    CALLS.append(case)
    raise RankHang("rank 1 stuck in all_reduce")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    CALLS.clear()
    monkeypatch.delenv("LPH_ABLATION", raising=False)
    monkeypatch.delenv("LPH_ABLATION_BUDGET_S", raising=False)
    token = record.use(record.TestRecord())
    yield
    record._CURRENT.reset(token)


def _failure(check, case: Case = BASE) -> BaseException:
    with pytest.raises(Exception) as info:
        check(case)
    return info.value


def test_the_needed_conditions_are_named_and_the_rest_are_independent():
    exc = _failure(fails_at_tp2_in_bf16)
    found = exc.diagnosis
    assert found["needs"] == ["tp >= 2", "dtype bfloat16"]
    assert found["independent_of"] == ["entropy gradient", "chunking", "temperature", "several samples"]
    assert found["summary"].startswith("needs: tp >= 2, dtype bfloat16; independent of: entropy gradient, chunking")
    minimal = Case.from_json(found["minimal_case"])
    assert (minimal.tp, minimal.dtype, minimal.chunk_size, minimal.temperature) == (2, "bfloat16", None, 1.0)
    assert len(minimal.samples) == 1 and not minimal.with_entropy
    # one trial per condition the Case has, plus the confirming run of the minimal Case
    assert len(CALLS) == 1 + 6 + 1
    assert record.current().diagnosis == found
    assert any(note.startswith("Diagnosis: needs: tp >= 2") for note in exc.__notes__)


def test_a_different_failure_leaves_the_condition_undetermined():
    found = _failure(raises_otherwise_at_tp1).diagnosis
    assert "tp" not in found["independent_of"] and "tp >= 2" not in found["needs"]
    [entry] = found["undetermined"]
    assert entry.startswith("tp >= 2 (fails differently (ValueError at test_diagnosis.py:")


def test_a_precondition_failing_on_the_ablated_case_is_not_the_same_failure():
    """Same type, another line: the tp-consistency check's own ``tp > 1`` assertion is no verdict on tp."""
    found = _failure(precondition_then_defect).diagnosis
    assert "tp" not in found["independent_of"] and "tp >= 2" not in found["needs"]
    assert found["undetermined"][0].startswith("tp >= 2 (fails differently (AssertionError at test_diagnosis.py:")


def test_a_hang_is_not_ablated():
    found = _failure(hangs).diagnosis
    assert found["skipped"].startswith("a hang-class failure") and not found["trials"]
    assert len(CALLS) == 1


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("LPH_ABLATION", "0")
    exc = _failure(fails_at_tp2_in_bf16)
    assert exc.diagnosis is None and len(CALLS) == 1


def test_the_time_budget_bounds_the_trials(monkeypatch):
    monkeypatch.setenv("LPH_ABLATION_BUDGET_S", "0")
    found = _failure(fails_at_tp2_in_bf16).diagnosis
    assert not found["trials"] and len(CALLS) == 1
    assert all("time budget" in entry for entry in found["undetermined"]) and len(found["undetermined"]) == 6


def test_a_bad_budget_is_named(monkeypatch):
    monkeypatch.setenv("LPH_ABLATION_BUDGET_S", "soon")
    with pytest.raises(ValueError, match="LPH_ABLATION_BUDGET_S"):
        diagnosis.budget_s()


def test_inside_hypothesis_only_the_reported_example_is_ablated(monkeypatch):
    runs = []
    real = diagnosis.diagnose

    def counting(*args, **kwargs):
        runs.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(diagnosis, "diagnose", counting)

    @settings(database=None, max_examples=30, phases=[Phase.generate, Phase.shrink], derandomize=True)
    @given(tp=st.sampled_from([1, 2, 4]), chunk=st.sampled_from([None, 1, 2]))
    def prop(tp, chunk):
        fails_at_tp2_in_bf16(Case(vocab=8, tp=tp, chunk_size=chunk, dtype="bfloat16"))

    with pytest.raises(AssertionError) as info:
        prop()
    assert len(runs) == 1, "shrinking must not ablate: only the final example"
    assert info.value.diagnosis["needs"] == ["tp >= 2", "dtype bfloat16"]
    assert "Diagnosis" in "\n".join(info.value.__notes__)


def test_rank_warnings_are_merged_per_message():
    with rank_warnings.collecting() as seen:
        rank_warnings.note(1, [{"category": "UserWarning", "message": "m", "where": "a:1"}])
        rank_warnings.note(0, [{"category": "UserWarning", "message": "m", "where": "a:1"}])
        rank_warnings.note(0, [{"category": "RuntimeWarning", "message": "n", "where": "b:2"}])
    merged = rank_warnings.merged(seen)
    assert [(e["category"], e["ranks"]) for e in merged] == [("UserWarning", [0, 1]), ("RuntimeWarning", [0])]
    rank_warnings.note(0, [{"category": "UserWarning", "message": "dropped", "where": "c:3"}])  # none open
    assert len(seen) == 3


def test_a_rank_sends_each_distinct_warning_once():
    with rank_warnings.capture() as caught:
        for _ in range(3):
            warnings.warn("same", UserWarning, stacklevel=1)
        warnings.warn("other", RuntimeWarning, stacklevel=1)
    assert [(e["category"], e["message"]) for e in rank_warnings.summary(caught)] == [
        ("UserWarning", "same"),
        ("RuntimeWarning", "other"),
    ]


# ---- acceptance on the stand-ins, through the rank pool --------------------------------------------


def test_entropy_backward_without_the_entropy_term_needs_the_entropy_gradient():
    case = Case(seed=5, vocab=8, tp=2, samples=((6, 4),), chunk_size=2, dtype="bfloat16")
    exc = _failure(lambda c: check_token_backward(c, FAKES + "EntropyGradDropped"), case)
    assert isinstance(exc, AssertionError)
    assert exc.diagnosis["needs"] == ["entropy gradient on"]
    assert {"tp", "dtype", "chunking"} <= set(exc.diagnosis["independent_of"])
    assert json.loads(exc.diagnosis["minimal_case"])["tp"] == 1


def test_hidden_backward_without_the_tp_all_reduce_needs_tp2_and_carries_torchs_warning():
    case = Case(seed=5, vocab=8, tp=2, samples=((6, 4),), chunk_size=2, extra={"hidden_size": 4})
    exc = _failure(lambda c: check_hidden_backward(c, FAKES + "HiddenNoTPAllReduce"), case)
    assert isinstance(exc, AssertionError)
    assert exc.diagnosis["needs"] == ["tp >= 2"]
    assert {"entropy gradient", "chunking"} <= set(exc.diagnosis["independent_of"])
    c10d = [w for w in exc.rank_warnings if "c10d::broadcast_" in w["message"]]
    assert len(c10d) == 1 and c10d[0]["ranks"] == [0, 1]
    assert record.current().warnings == exc.rank_warnings


@replayable
def calls_another_check(case: Case, spec: str = "impl") -> None:
    fails_at_tp2_in_bf16(case, spec)


def test_a_check_calling_a_check_is_diagnosed_once():
    exc = _failure(calls_another_check)
    assert exc.diagnosis["check"].endswith(":fails_at_tp2_in_bf16")
    assert len(CALLS) == 1 + 6 + 1
    assert sum(note.startswith("Diagnosis:") for note in exc.__notes__) == 1
