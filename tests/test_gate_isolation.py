"""One defect, one red check: failures that do not hide one another (isolation, sub-verdicts, signatures).

The stand-in revisions of tests/fakes/isolation/revisions.py run through the
real checks as Hypothesis properties (derandomised, single-rank Cases, in
this process); their verdicts are built by the pytest plugin's own verdict
path and classified by the gate, base vs PR and against expectations, with
the counterexamples replayed across by ``harness.gate.replays.replay_one``
(what the replay subprocess runs). tests/test_gate_cli.py-style end-to-end
runs of the same stand-ins through ``python -m harness.gate`` are at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from harness import pytest_plugin
from harness.cases.strategies import TOKEN_LEVEL, cases
from harness.checks import failure, record, subtests
from harness.checks.parity import check_inputs_unmutated, check_token_backward, check_token_forward
from harness.gate import compare, expectations, replays, single
from harness.gate.specs import ROOT
from harness.gate.tiers import CONTRACT
from harness.gate.verdicts import ERROR, FAIL, PASS, Run, Verdict
from harness.ranks import hang_memo

STAND_INS = "tests/fakes/isolation/revisions.py:"
FORWARD = "properties/test_forward_parity.py::test_token_forward_parity"
BACKWARD = "properties/test_backward_parity.py::test_token_backward_parity"
UNMUTATED = "properties/test_inputs_unmutated.py::test_token_logits_unmutated"
CHECKS = {
    FORWARD: check_token_forward,
    BACKWARD: check_token_backward,
    UNMUTATED: lambda case, spec: check_inputs_unmutated(case, spec, level="token"),
}
SINGLE_RANK = cases(tp=st.just(1), cp_sizes=TOKEN_LEVEL, max_samples=3, max_length=12, max_vocab_local=16)


class _Report:
    """What the plugin's verdict path reads of a pytest report."""

    def __init__(self, nodeid, exc, passed):
        self.nodeid, self.when = nodeid, "call"
        self.outcome = "failed" if exc is not None else "passed"
        self.failed, self.skipped = exc is not None, False
        self.user_properties = [("tier", CONTRACT), ("passed_outputs", sorted(passed))]
        if exc is not None:
            self.user_properties.append((pytest_plugin.FACTS, failure.facts_of(exc).to_dict()))


def verdict(nodeid: str, spec: str) -> Verdict:
    """The verdict of one property (the check of ``nodeid`` over generated single-rank Cases) against ``spec``."""
    check = CHECKS[nodeid]
    observed = record.TestRecord()
    token = record.use(observed)
    hang_memo.use(hang_memo.HangMemo())

    @settings(max_examples=12, derandomize=True, database=None, deadline=None, phases=[Phase.generate, Phase.shrink])
    @given(case=SINGLE_RANK)
    def prop(case):
        check(case, spec)

    try:
        prop()
        raised = None
    except Exception as exc:  # a failed property: its facts are the verdict's
        raised = exc
    finally:
        record._CURRENT.reset(token)
    return pytest_plugin._raw_verdict(_Report(nodeid, raised, observed.passed_outputs), "impl")


def suite(spec: str, ids=tuple(CHECKS)) -> Run:
    return Run(STAND_INS + spec, {nodeid: verdict(nodeid, STAND_INS + spec) for nodeid in ids})


def in_process(items, target, env, timeout_s):
    return [replays.replay_one(check, case, target, options) for check, case, options in items]


def compare_runs(base: Run, head: Run):
    return compare.compare(
        base,
        head,
        compare.Side("base", base.target),
        compare.Side("head", head.target),
        replay=in_process,
    )


def outcomes(decision) -> dict:
    return {(row.id, row.output): row.outcome for row in decision.rows}


@pytest.fixture(autouse=True)
def _no_ablation(monkeypatch):
    """The diagnosis by ablation is tested in tests/test_diagnosis.py; here only the verdicts matter (speed)."""
    monkeypatch.setenv("LPH_ABLATION", "0")


@pytest.fixture(scope="module")
def writes_and_scales():
    return suite("WritesAndScales")


def test_a_write_and_a_wrong_gradient_fail_two_checks_each_with_its_own_message(writes_and_scales):
    """The write is the inputs-unmutated check's finding alone; the gradient is backward parity's alone."""
    checks = writes_and_scales.verdicts
    assert checks[FORWARD].outcome == PASS  # the values are right: the write does not make the check red
    write, gradient = checks[UNMUTATED], checks[BACKWARD]
    assert (write.outcome, write.kind) == (FAIL, failure.MUTATION) and "version counter moved by 2" in write.reason
    assert (gradient.outcome, gradient.kind) == (FAIL, failure.GRADIENT) and "grad(logits)" in gradient.reason
    assert write.subtests[subtests.INPUTS]["outcome"] == FAIL
    assert gradient.subtests[subtests.GRAD_LOGITS]["outcome"] == FAIL
    assert subtests.INPUTS not in gradient.subtests  # the gradient check never judges writes


def test_a_pr_fixing_only_the_gradient_reads_fixed_for_it_and_still_failing_for_the_write(writes_and_scales):
    decision = compare_runs(writes_and_scales, suite("Writes"))
    found = outcomes(decision)
    assert found[(BACKWARD, subtests.GRAD_LOGITS)] == "FIXED"
    assert found[(UNMUTATED, subtests.INPUTS)] == "STILL FAILING"
    assert found[(FORWARD, "")] == "PASS"
    assert decision.exit_code == 0 and not decision.new_failures
    assert [(e.id, e.output) for e in decision.fixed] == [(BACKWARD, subtests.GRAD_LOGITS)]


def test_a_pr_adding_a_wrong_entropy_to_a_failing_check_reads_new_fail_for_the_entropy():
    base, head = suite("WrongLogProbs", (FORWARD,)), suite("WrongLogProbsAndEntropy", (FORWARD,))
    assert base.verdicts[FORWARD].outcome == FAIL and head.verdicts[FORWARD].outcome == FAIL
    decision = compare_runs(base, head)
    found = outcomes(decision)
    assert found[(FORWARD, subtests.LOG_PROBS)] == "STILL FAILING"
    assert found[(FORWARD, subtests.ENTROPY)] == "NEW FAIL"
    assert [(e.id, e.output) for e in decision.new_failures] == [(FORWARD, subtests.ENTROPY)]
    assert decision.exit_code == 1


def test_a_pr_turning_one_exception_into_another_reads_fails_differently():
    base, head = suite("RaisesValueError", (FORWARD,)), suite("RaisesRuntimeError", (FORWARD,))
    assert base.verdicts[FORWARD].kind == head.verdicts[FORWARD].kind == failure.ERROR  # one kind: only the type moved
    decision = compare_runs(base, head)
    assert outcomes(decision) == {(FORWARD, ""): "FAILS DIFFERENTLY"}
    (entry,) = decision.new_failures
    assert "exception ValueError -> RuntimeError" in entry.reason and decision.exit_code == 1
    # The same exception on both sides is the same failure.
    assert outcomes(compare_runs(base, suite("RaisesValueError", (FORWARD,)))) == {(FORWARD, ""): "STILL FAILING"}


def test_expectations_record_each_outputs_signature_and_a_changed_exception_fails_differently(tmp_path):
    base = suite("RaisesValueError", (FORWARD,))
    path = tmp_path / "stand-in.toml"
    path.write_text(expectations.render(base, {}, "stand-in"))
    written = expectations.load(path)
    ((key, entry),) = written.items()
    assert key == (FORWARD, "") and entry.expected_signature["exception"] == "ValueError"
    assert single.classify(base, written).exit_code == 0  # KNOWN
    decision = single.classify(suite("RaisesRuntimeError", (FORWARD,)), written)
    assert [row.outcome for row in decision.rows] == ["FAILS DIFFERENTLY"]


def test_expectations_per_output_read_fixed_for_the_fixed_output_alone(writes_and_scales, tmp_path):
    path = tmp_path / "stand-in.toml"
    path.write_text(expectations.render(writes_and_scales, {}, "stand-in"))
    written = expectations.load(path)
    assert set(written) == {(BACKWARD, subtests.GRAD_LOGITS), (UNMUTATED, subtests.INPUTS)}
    decision = single.classify(suite("Writes"), written)
    found = outcomes(decision)
    assert found[(BACKWARD, subtests.GRAD_LOGITS)] == "FIXED" and found[(UNMUTATED, subtests.INPUTS)] == "KNOWN"


# ---- end to end: python -m harness.gate on the stand-ins ----------------------------------------------


def _gate(*args, reports):
    env = {**os.environ, "HYPOTHESIS_PROFILE": "smoke", "LPH_ABLATION": "0"}
    command = [sys.executable, "-m", "harness.gate", *args, "--reports", str(reports)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.nightly  # the same decisions from stand-in runs are the tests above; end to end it runs nightly
def test_end_to_end_the_gradient_fix_is_fixed_and_the_write_still_fails(tmp_path):
    """The real gate (two pytest runs, replays in a subprocess) on the properties themselves."""
    select = [
        f"{BACKWARD}",
        "properties/test_inputs_unmutated.py::test_token_logits_unmutated",
        "properties/test_forward_parity.py::test_token_forward_parity",
    ]
    head, base = STAND_INS + "Writes", STAND_INS + "WritesAndScales"
    code, output = _gate(head, "--baseline", base, *select, reports=tmp_path)
    assert code == 0, output[-3000:]
    slug = STAND_INS.replace("/", "_").replace(":", "_")
    decision = json.loads((tmp_path / f"{slug}Writes-vs-{slug}WritesAndScales" / "gate.json").read_text())
    assert [(e["id"], e["output"]) for e in decision["fixed"]] == [(BACKWARD, "grad(logits)")]
    assert [(e["id"], e["output"]) for e in decision["still_failing"]] == [(UNMUTATED, "inputs")]
    assert not decision["new_failures"]


def test_a_setup_that_raised_is_an_error_never_a_fail():
    """A fixture that raised (``--target`` naming no family) ran no check: ERROR, with the setup's message."""
    report = _Report(FORWARD, ValueError("unknown target 'verl'"), ())
    report.when = "setup"
    found = pytest_plugin._raw_verdict(report, "verl")
    assert found.outcome == ERROR and found.subtests == {} and "unknown target" in found.reason
