"""The gate end to end: ``python -m harness.gate`` on stand-in revisions, offline.

The "revisions" are impl/ itself, impl/ carrying a re-created historic bug
(``mutant=NAME``) and impl/ keeping extra fp32 ``[rows, V_local]`` buffers
alive (tests/fakes/gate/budget.py). Each run selects only the checks it
needs and uses the ``smoke`` Hypothesis profile; the full-suite figures are
in docs/gate.md.
"""

import json
import os
import subprocess
import sys

import pytest

from harness.gate import compare, expectations, single
from harness.gate.specs import ROOT
from harness.gate.verdicts import Run

GATE_FILE = "regressions/test_inverted_no_grad_gate.py"
# The file's check that the mutant breaks: one regression keeps these end-to-end runs to a few seconds each.
GATE_CHECK = "test_requires_grad_equals_gate_and_gradient_matches_oracle"
BUDGET = "tests/fakes/gate/budget.py"
pytestmark = pytest.mark.slow


def gate(*args, reports):
    # The decisions are under test, not the diagnosis of each failure (tests/test_diagnosis.py): its ablation
    # would add up to 20 s per failing check on each side (harness/checks/diagnosis.py).
    env = {**os.environ, "HYPOTHESIS_PROFILE": "smoke", "LPH_ABLATION": "0"}
    command = [sys.executable, "-m", "harness.gate", *args, "--reports", str(reports)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return result.returncode, result.stdout + result.stderr


def decision_of(reports, name):
    return json.loads((reports / name / "gate.json").read_text())


def test_inverted_gate_pr_is_a_new_fail_and_its_revert_fixes_it(tmp_path):
    code, output = gate(
        "mutant=inverted_no_grad_gate", "--baseline", "impl", GATE_FILE, "-k", GATE_CHECK, reports=tmp_path
    )
    assert code == 1, output[-3000:]
    decision = decision_of(tmp_path, "mutant-inverted_no_grad_gate-vs-impl")
    new = {entry["id"] for entry in decision["new_failures"]}
    assert new == {f"{GATE_FILE}::{GATE_CHECK}"} and not decision["fixed"]
    assert all(entry["tier"] == "contract" for entry in decision["new_failures"])
    # The revert: the same two runs the other way round (replays included) fix exactly those checks.
    base, head = Run.load(tmp_path / "impl"), Run.load(tmp_path / "mutant-inverted_no_grad_gate")
    revert = compare.compare(
        head,
        base,
        compare.Side("mutant", "impl", {"LPH_MUTANT": "inverted_no_grad_gate"}),
        compare.Side("impl", "impl"),
    )
    assert revert.exit_code == 0 and {e.id for e in revert.fixed} == new and not revert.new_failures


# The figure comparison itself is tests/test_gate.py::test_budget_figures_decide_worse_and_improved; end to end
# (two gate runs, each tracing a real scale) it runs nightly.
@pytest.mark.nightly
def test_one_more_buffer_is_a_budget_new_fail_with_both_figures(tmp_path):
    # One real scale is enough to show the figure travel (each gate run traces it under fake tensors).
    select = ["properties/test_memory_bounds.py", "-k", "test_forward_backward_at_real_scale and skyrl"]
    code, output = gate(f"{BUDGET}:OneMoreBuffer", "--baseline", "impl", *select, reports=tmp_path)
    assert code == 1, output[-3000:]
    decision = decision_of(tmp_path, f"{BUDGET.replace('/', '_')}_OneMoreBuffer-vs-impl")
    assert decision["new_failures"] and all(e["tier"] == "budget" for e in decision["new_failures"])
    base, head = Run.load(tmp_path / "impl"), Run.load(tmp_path / f"{BUDGET.replace('/', '_')}_OneMoreBuffer")
    assert len(head.checks()) == 1, head.checks()
    for name, verdict in head.checks().items():
        before, after = base.verdicts[name].figures["peak_over_logits"], verdict.figures["peak_over_logits"]
        assert before["case"] == after["case"] and after["value"] > before["value"] + 0.9, (name, before, after)
    # Against a base that already exceeds the bound, one buffer more is worse by its figure alone.
    code, output = gate(f"{BUDGET}:TwoMoreBuffers", "--baseline", f"{BUDGET}:OneMoreBuffer", *select, reports=tmp_path)
    assert code == 1, output[-3000:]
    decision = decision_of(
        tmp_path, f"{BUDGET.replace('/', '_')}_TwoMoreBuffers-vs-{BUDGET.replace('/', '_')}_OneMoreBuffer"
    )
    assert decision["new_failures"] and all(
        "worse than the base: peak_over_logits" in e["reason"] for e in decision["new_failures"]
    )


def test_single_mode_known_failures_from_an_updated_expectations_file(tmp_path):
    known = tmp_path / "mutant.toml"
    code, output = gate(
        "mutant=inverted_no_grad_gate",
        GATE_FILE,
        "-k",
        GATE_CHECK,
        "--expectations",
        str(known),
        "--update-expectations",
        reports=tmp_path,
    )
    assert code == 1, output[-3000:]  # nothing was expected yet: unexpected contract failures
    written = expectations.load(known)
    assert written and all(e.reason.startswith(expectations.TO_EXPLAIN) for e in written.values())
    run = Run.load(tmp_path / "mutant-inverted_no_grad_gate")
    decision = single.classify(run, written)
    # One entry per failing output, and each is what the run still fails with.
    assert decision.exit_code == 0 and {(e.id, e.output) for e in decision.still_failing} == set(written)


# The rule itself is tests/test_gate_kinds.py (a failure that changes kind, a hang replayed); end to end (a hang
# waited out on both sides and replayed) it runs nightly.
@pytest.mark.nightly
def test_a_known_wrong_value_that_now_hangs_is_red_base_vs_pr(tmp_path):
    """The base returns a wrong loss, the PR hangs on distributed examples: the check as a whole FAILS DIFFERENTLY, red.

    The PR's loss itself is right wherever it returns (the stand-in is impl/ plus a hang), including on the base's
    replayed counterexample, so the two loss outputs the base got wrong read FIXED, output by output.
    """
    stand_ins = "tests/fakes/failure_targets.py"
    select = [GATE_FILE, "-k", GATE_CHECK]
    base = f"{stand_ins}:WrongValueOnOneRank"  # its counterexample is single-rank, where the PR returns
    code, output = gate(f"{stand_ins}:HangForward", "--baseline", base, *select, reports=tmp_path)
    assert code == 1, output[-3000:]
    slug = stand_ins.replace("/", "_")
    decision = decision_of(tmp_path, f"{slug}_HangForward-vs-{slug}_WrongValueOnOneRank")
    assert decision["counts"] == {"FAILS DIFFERENTLY": 1, "FIXED": 2}, decision["counts"]
    assert {e["output"] for e in decision["fixed"]} == {"loss", "loss(log_probs)"}, decision["fixed"]
    (entry,) = decision["new_failures"]
    assert entry["output"] == ""
    assert entry["reason"].startswith("the base fails on its outputs, the PR as hang")
    assert (tmp_path / f"{slug}_HangForward-vs-{slug}_WrongValueOnOneRank" / "summary.md").read_text().count(
        "### BLOCKING"
    ) == 1
