"""The gate's logic on hand-made verdicts: tiers, expectations, single and base-vs-PR decisions, reports.

No suite runs here (tests/test_gate_cli.py runs the real thing end to end):
each test builds the verdicts a run would have written and checks the
decision, the exit code and what the reports say.
"""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from harness import pytest_plugin
from harness.checks import failure
from harness.gate import compare, expectations, retries, single, specs
from harness.gate.compare import Side
from harness.gate.decision import EXIT_UNDECIDED, GATE_FILE, SUMMARY_FILE
from harness.gate.render import Row, markdown, terminal_lines
from harness.gate.replays import Replayed
from harness.gate.specs import ROOT
from harness.gate.tiers import BUDGET, CONTRACT, HARDENING, TIERS, parse_tiers, tier_of_item
from harness.gate.verdicts import ERROR, FAIL, HANG, PASS, UNSUPPORTED, Run, Verdict
from harness.ranks.errors import CollectiveHang, PoolStartError, RankError, RankHang
from harness.targets.upstream.loader import MissingUpstream
from harness.targets.upstream.symbols import MissingUpstreamImport

GATE = "regressions/test_inverted_no_grad_gate.py::test_requires_grad_equals_gate_and_gradient_matches_oracle"
PARITY = "properties/test_backward_parity.py::test_token_backward_parity"
SPECIAL = "properties/test_backward_parity.py::test_token_backward_parity_special_values"
MEMORY = "properties/test_memory_bounds.py::test_forward_backward_at_real_scale[skyrl-1650]"
PACKED = "properties/test_forward_parity.py::test_packed_forward_parity"
CASE = '{"seed": 3, "vocab": 8}'
CHECK = "harness.checks.parity:check_token_backward"
REPLAY = f"python -m harness.replay {CHECK} --target T --case '{CASE}'"


def verdict(id, outcome=PASS, tier=CONTRACT, **extra) -> Verdict:
    return Verdict(id, outcome, tier, **extra)


def run(*verdicts) -> Run:
    return Run("t", {v.id: v for v in verdicts})


def figure(value, case="MemoryCase(rows=35840)"):
    return {"peak_over_logits": {"value": value, "case": case}}


# ---- tiers ---------------------------------------------------------------------------


class _Mark:
    def __init__(self, *args):
        self.args = args


class _Item:
    def __init__(self, nodeid, *tiers):
        self.nodeid, self._marks = nodeid, [_Mark(t) for t in tiers]

    def iter_markers(self, name):
        return iter(self._marks)


def test_every_check_has_exactly_one_tier():
    assert tier_of_item(_Item(PARITY, CONTRACT)) == CONTRACT
    with pytest.raises(ValueError, match="needs exactly one tier"):
        tier_of_item(_Item(PARITY))
    with pytest.raises(ValueError, match="give exactly one"):
        tier_of_item(_Item(PARITY, CONTRACT, HARDENING))
    with pytest.raises(ValueError, match="give exactly one"):
        tier_of_item(_Item(PARITY, "important"))
    assert tier_of_item(_Item("tests/test_pool.py::test_x")) == "self-test"


def test_tiers_option_is_validated():
    assert parse_tiers("contract, budget") == (CONTRACT, BUDGET)
    with pytest.raises(ValueError, match="unknown tier"):
        parse_tiers("contract,speed")


def test_collected_suite_declares_a_tier_per_check():
    """Collecting properties/ and regressions/ succeeds only if every check has exactly one tier."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "properties", "regressions"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout.count("::") > 50


# ---- verdicts --------------------------------------------------------------------------


class _Report:
    """What the plugin's verdict path reads of a pytest report (when, outcome, user properties)."""

    def __init__(self, outcome, facts, when="call"):
        self.nodeid, self.when, self.outcome = PARITY, when, outcome
        self.failed, self.skipped = outcome == "failed", outcome == "skipped"
        self.user_properties = [("tier", CONTRACT), (pytest_plugin.FACTS, facts.to_dict())]


def _verdict_of(exc: BaseException, outcome="failed") -> Verdict:
    return pytest_plugin._raw_verdict(_Report(outcome, failure.facts_of(exc)), "impl")


@pytest.mark.parametrize("wording", ["rank 1 stuck in all_reduce", "a completely reworded message: Case: {} Replay:"])
def test_verdict_facts_come_from_the_exception_not_its_message(wording):
    """Rewording a message changes no verdict: kind, infrastructure, replay and capabilities are facts."""
    hang = _verdict_of(RankHang(wording))
    assert (hang.outcome, hang.kind, hang.diverged) == (FAIL, HANG, False)
    proven = CollectiveHang(wording)
    proven.diverged = True
    assert _verdict_of(proven).diverged
    assert (_verdict_of(PoolStartError(wording)).outcome, _verdict_of(RankError(wording)).kind) == (ERROR, "error")
    # Code that cannot be loaded decides nothing about the target's behaviour: ERROR, never the check's FAIL.
    for missing in (MissingUpstream(wording), MissingUpstreamImport("pydantic", "a module", "stand it in")):
        assert (_verdict_of(missing).outcome, _verdict_of(missing).kind) == (ERROR, failure.LOAD)
    wrong = failure.mark(failure.CheckFailure(wording, kind=failure.GRADIENT), check=CHECK, case=CASE, replay=REPLAY)
    verdict = _verdict_of(wrong)
    assert (verdict.kind, verdict.check, verdict.case, verdict.replay) == (failure.GRADIENT, CHECK, CASE, REPLAY)
    assert verdict.replayable and verdict.reason == f"CheckFailure: {wording}"
    # Hypothesis reports several distinct failures as a group: the one carrying a Case decides.
    group = ExceptionGroup("two bugs", [ValueError(wording), wrong])
    assert _verdict_of(group).kind == failure.GRADIENT
    skipped = failure.mark(pytest.skip.Exception(wording), kind=failure.UNSUPPORTED, missing=["cp_zigzag"])
    assert (_verdict_of(skipped, "skipped").outcome, _verdict_of(skipped, "skipped").missing) == (
        UNSUPPORTED,
        ["cp_zigzag"],
    )
    plain_skip = _verdict_of(pytest.skip.Exception(f"UNSUPPORTED: {wording}"), "skipped")
    assert plain_skip.outcome == "SKIPPED"  # the word in a message makes nothing UNSUPPORTED
    assert _verdict_of(AssertionError(wording)).kind == failure.ASSERTION


def test_check_failure_kinds_are_validated():
    with pytest.raises(ValueError, match="kind='valu'"):
        failure.CheckFailure("x", kind="valu")


def test_verdicts_round_trip(tmp_path):
    original = run(verdict(MEMORY, FAIL, BUDGET, reason="peak", figures=figure(3.0)), verdict(GATE))
    original.save(tmp_path)
    loaded = Run.load(tmp_path)
    assert loaded.verdicts == original.verdicts


# ---- expectations -------------------------------------------------------------------------


def test_expectations_parse_and_refuse_malformed_entries(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(f'[[known]]\nid = "{PARITY}"\nreason = "NaN at -inf"\nlink = "https://example.org/1"\n')
    assert expectations.load(good)[(PARITY, None)].reason == "NaN at -inf"
    for body, message in [
        (f'[[known]]\nid = "{PARITY}"\n', "lacks"),
        (f'[[known]]\nid = "{PARITY}"\nreason = "r"\nwhy = "x"\n', "unknown keys"),
        (f'[[known]]\nid = "{PARITY}"\nreason = "r"\noutcome = "PASS"\n', "outcome"),
        (f'[[known]]\nid = "{PARITY}"\nreason = "r"\n[[known]]\nid = "{PARITY}"\nreason = "s"\n', "twice"),
        ("[[known]\n", "not valid TOML"),
    ]:
        bad = tmp_path / "bad.toml"
        bad.write_text(body)
        with pytest.raises(ValueError, match=message):
            expectations.load(bad)


def test_update_keeps_written_reasons_and_marks_new_ones(tmp_path):
    previous = {(PARITY, None): expectations.Expectation(PARITY, "NaN at -inf", "https://example.org/1")}
    text = expectations.render(
        run(verdict(PARITY, FAIL, reason="grad wrong"), verdict(GATE, FAIL, reason="E: gate"), verdict(SPECIAL)),
        previous,
        "header",
    )
    path = tmp_path / "e.toml"
    path.write_text(text)
    loaded = expectations.load(path)
    assert set(loaded) == {(PARITY, ""), (GATE, "")}  # written per output: "" is the check as a whole
    assert loaded[(PARITY, "")].reason == "NaN at -inf" and loaded[(PARITY, "")].link == "https://example.org/1"
    assert loaded[(GATE, "")].reason == expectations.TO_EXPLAIN + "E: gate"


def test_update_from_a_partial_run_keeps_the_entries_it_did_not_run(tmp_path):
    """Rewriting from a run of some test files must not drop the known failures of the others, nor the header."""
    path = tmp_path / "e.toml"
    path.write_text(
        "# Known failures of X at abc.\n# Second line.\n\n[[known]]\n"
        f'id = "{MEMORY}"\ntier = "budget"\nreason = "4x logits"\nlink = "https://example.org/m"\n'
    )
    previous = expectations.load(path)
    path.write_text(
        expectations.render(run(verdict(GATE, FAIL, reason="E: gate")), previous, expectations.header_of(path))
    )
    loaded = expectations.load(path)
    assert set(loaded) == {(MEMORY, None), (GATE, "")}
    assert loaded[(MEMORY, None)] == previous[(MEMORY, None)] and loaded[(MEMORY, None)].tier == "budget"
    assert path.read_text().startswith("# Known failures of X at abc.\n# Second line.\n")


def test_shipped_expectations_have_true_reasons():
    for family in expectations.FAMILIES:
        path = expectations.default_path(family)
        if path is None:
            continue
        for entry in expectations.load(path).values():
            assert not entry.reason.startswith(expectations.TO_EXPLAIN), f"{path}: {entry.id} still needs its reason"
            assert entry.id.split("/", 1)[0] in ("properties", "regressions"), entry.id


# ---- one target against its expectations ---------------------------------------------------


def test_single_mode_outcomes_and_exit_code():
    result = run(
        verdict(GATE, FAIL, reason="gate inverted"),
        verdict(PARITY, FAIL, reason="NaN"),
        verdict(SPECIAL, FAIL, HARDENING, reason="NaN at -inf"),
        verdict(MEMORY, PASS, BUDGET),
        verdict(PACKED, UNSUPPORTED, reason="target 't' does not support ['packed']"),
    )
    known = {
        (PARITY, None): expectations.Expectation(PARITY, "NaN entropy"),
        (MEMORY, None): expectations.Expectation(MEMORY, "4x logits"),
        ("properties/gone.py::test_x", None): expectations.Expectation("properties/gone.py::test_x", "old"),
    }
    decision = single.classify(result, known)
    outcomes = {row.id: row.outcome for row in decision.rows}
    assert outcomes == {GATE: FAIL, PARITY: "KNOWN", SPECIAL: FAIL, MEMORY: "FIXED", PACKED: UNSUPPORTED}
    assert sorted(e.id for e in decision.new_failures) == sorted([GATE, SPECIAL])
    assert decision.exit_code == 1 and [e.id for e in decision.blocking] == [GATE]
    assert any("gone.py" in note for note in decision.notes)
    # Only the hardening failure left: green by default (contract gated), red when hardening is gated.
    decision = single.classify(result, {**known, (GATE, None): expectations.Expectation(GATE, "inverted gate")})
    assert decision.exit_code == 0
    assert single.classify(result, known, tiers=TIERS).exit_code == 1
    # FIXED is listed, and red only under --strict (MEMORY is budget: gate budget to see it).
    others = {(GATE, None): known[(PARITY, None)], (SPECIAL, None): known[(PARITY, None)]}
    decision = single.classify(result, {**known, **others}, tiers=TIERS)
    assert decision.exit_code == 0 and [e.id for e in decision.fixed] == [MEMORY]
    strict = single.classify(result, {**known, **others}, tiers=TIERS, strict=True)
    assert strict.exit_code == 1


# ---- base vs PR ---------------------------------------------------------------------------------


BASE, HEAD = Side("base", "T"), Side("head", "T")


def fake_replay(outcomes: dict):
    """A replay function answering from ``outcomes[(target side env tag, case)]``; records its calls."""
    calls = []

    def replay(items, target, env, timeout_s):
        calls.append((env.get("side"), list(items)))
        answers = [(call, outcomes[(env.get("side"), call[1])]) for call in items]
        return [
            Replayed(check, case, outcome, "replayed", options=options) for (check, case, options), outcome in answers
        ]

    replay.calls = calls
    return replay


def sides():
    return Side("base", "T", {"side": "base"}), Side("head", "T", {"side": "head"})


def failing(id, case, tier=CONTRACT, **extra):
    extra.setdefault("kind", failure.VALUE)
    return verdict(id, FAIL, tier, reason=f"bad on {case}", check=CHECK, case=case, replay=REPLAY, **extra)


def test_new_fail_fixed_and_still_failing():
    base_side, head_side = sides()
    base = run(verdict(GATE), failing(PARITY, "c1"), failing(SPECIAL, "c2", HARDENING), verdict(PACKED, UNSUPPORTED))
    head = run(failing(GATE, "c3"), verdict(PARITY), failing(SPECIAL, "c4", HARDENING), failing(PACKED, "c5"))
    replay = fake_replay({("base", "c3"): PASS, ("head", "c1"): PASS})
    decision = compare.compare(base, head, base_side, head_side, replay=replay)
    outcomes = {row.id: row.outcome for row in decision.rows}
    assert outcomes == {GATE: "NEW FAIL", PARITY: "FIXED", SPECIAL: "STILL FAILING", PACKED: "NEW FAIL"}
    assert sorted(e.id for e in decision.new_failures) == sorted([GATE, PACKED])
    assert [e.id for e in decision.fixed] == [PARITY]
    assert decision.exit_code == 1
    # Only the differing checks were replayed, each on the other side.
    assert sorted(replay.calls) == [
        ("base", [(CHECK, "c3", "")]),
        ("head", [(CHECK, "c1", "")]),
    ]


def test_a_replay_runs_the_check_as_the_test_called_it():
    """A ``_bit_for_bit`` twin calls its check with ``exact=True``: replayed on the other side without it, the
    tolerant check would pass there and a failure both sides share would read NEW FAIL."""
    base_side, head_side = sides()
    exact = '{"exact": true}'
    head = run(failing(GATE, "c3", options=exact))
    replay = fake_replay({("base", "c3"): FAIL})
    decision = compare.compare(run(verdict(GATE)), head, base_side, head_side, replay=replay)
    assert replay.calls == [("base", [(CHECK, "c3", exact)]), ("head", [])]
    assert {row.id: row.outcome for row in decision.rows} == {GATE: "STILL FAILING"}


def test_an_output_the_pr_never_reaches_on_the_bases_counterexample_is_not_fixed():
    """The base fails the loss on c1; the PR passes the loss on its own examples but raises on c1 before judging it
    (slime #1185: an in-place write makes the backward raise). The loss is not FIXED: the PR never gave one there."""
    base_side, head_side = sides()
    loss_fails = {"loss": {"outcome": FAIL, "kind": failure.VALUE, "headline": "got nan"}}
    base = run(failing(PARITY, "c1", subtests=loss_fails))
    crashed = {"": {"outcome": FAIL, "kind": failure.ERROR, "headline": "RankError: modified by an inplace operation"}}
    head = run(failing(PARITY, "c2", kind=failure.ERROR, subtests={**crashed, "loss": {"outcome": PASS}}))

    def replay(items, target, env, timeout_s):
        return [Replayed(c, k, FAIL, "RankError", failure.ERROR, crashed, options=o) for c, k, o in items]

    decision = compare.compare(base, head, base_side, head_side, replay=replay)
    assert not decision.fixed, decision.rows
    assert any("fails the whole check before judging" in note for note in decision.notes), decision.notes


def test_counterexamples_replayed_across_decide_pre_existing():
    """A PR failure the base also fails on that Case is not new; a base failure the PR still fails is not fixed."""
    base_side, head_side = sides()
    base = run(verdict(GATE), failing(PARITY, "c1"))
    head = run(failing(GATE, "c3"), verdict(PARITY))
    decision = compare.compare(
        base, head, base_side, head_side, replay=fake_replay({("base", "c3"): FAIL, ("head", "c1"): FAIL})
    )
    assert {row.id: row.outcome for row in decision.rows} == {GATE: "STILL FAILING", PARITY: "STILL FAILING"}
    assert decision.exit_code == 0 and not decision.new_failures and not decision.fixed


def test_budget_figures_decide_worse_and_improved():
    base_side, head_side = sides()
    replay = fake_replay({})
    base = run(verdict(MEMORY, FAIL, BUDGET, reason="peak 3x", figures=figure(3.0)))
    worse = run(verdict(MEMORY, FAIL, BUDGET, reason="peak 4x", figures=figure(4.0)))
    decision = compare.compare(base, worse, base_side, head_side, replay=replay)
    assert [e.id for e in decision.new_failures] == [MEMORY] and decision.exit_code == 1
    assert "3 -> 4 (+33.3%)" in decision.new_failures[0].reason
    better = run(verdict(MEMORY, FAIL, BUDGET, reason="peak 2.5x", figures=figure(2.5)))
    decision = compare.compare(base, better, base_side, head_side, replay=replay)
    assert decision.exit_code == 0 and [e.id for e in decision.improved] == [MEMORY]
    within = run(verdict(MEMORY, FAIL, BUDGET, reason="peak 3.1x", figures=figure(3.1)))
    assert compare.compare(base, within, base_side, head_side, replay=replay).exit_code == 0
    other_case = run(verdict(MEMORY, FAIL, BUDGET, reason="peak 4x", figures=figure(4.0, case="another")))
    assert compare.compare(base, other_case, base_side, head_side, replay=replay).exit_code == 0
    # Gated tiers: a budget NEW FAIL does not block a contract-only gate.
    assert compare.compare(base, worse, base_side, head_side, replay=replay, tiers=(CONTRACT,)).exit_code == 0


def test_a_failures_plain_figures_are_not_budget_figures():
    """Both sides failing a parity check with ``max_error``/``bound`` numbers (no case): STILL FAILING, no crash."""
    base_side, head_side = sides()
    plain = {"max_error": float("inf"), "bound": 8e-06, "naive_error": 1.5e-07}
    base = run(verdict(SPECIAL, FAIL, HARDENING, reason="nan", kind="value", figures=plain))
    head = run(verdict(SPECIAL, FAIL, HARDENING, reason="nan", kind="value", figures=dict(plain)))
    decision = compare.compare(base, head, base_side, head_side, replay=fake_replay({}))
    assert {row.id: row.outcome for row in decision.rows} == {SPECIAL: "STILL FAILING"}
    assert decision.exit_code == 0 and not decision.improved


def test_hang_is_named_in_the_outcome():
    base_side, head_side = sides()
    hung = failing(GATE, "c3", kind=HANG)
    decision = compare.compare(
        run(verdict(GATE)), run(hung), base_side, head_side, replay=fake_replay({("base", "c3"): PASS})
    )
    assert decision.rows[0].outcome == "NEW FAIL (hang)"


# ---- infrastructure errors ----------------------------------------------------------------------

POOL_DOWN = "harness.ranks.errors.PoolStartError: the rank pool of world size 4 failed to start (2 attempts)"


def test_pool_start_failure_is_an_error_not_a_fail():
    """The machine's failure is ERROR: never red for the target, exit 3 (undecided) when gated."""
    result = run(verdict(GATE, ERROR, reason=POOL_DOWN), verdict(PARITY, FAIL, reason="NaN"))
    decision = single.classify(result, {(PARITY, None): expectations.Expectation(PARITY, "NaN entropy")})
    assert {row.id: row.outcome for row in decision.rows} == {GATE: ERROR, PARITY: "KNOWN"}
    assert not decision.new_failures and [e.id for e in decision.errors] == [GATE]
    assert decision.exit_code == EXIT_UNDECIDED and "undecided" in decision.summary()
    # A real new failure still decides the run: red (1), whatever else could not be decided.
    result.verdicts[SPECIAL] = verdict(SPECIAL, FAIL, reason="wrong")
    assert single.classify(result, {}, tiers=TIERS).exit_code == 1
    # An ERROR in a tier that is not gated does not hold the gate.
    assert single.classify(run(verdict(SPECIAL, ERROR, HARDENING, reason=POOL_DOWN)), {}).exit_code == 0


def test_error_on_either_side_is_never_a_new_fail():
    base_side, head_side = sides()
    base = run(verdict(GATE, ERROR, reason=POOL_DOWN), verdict(PARITY), verdict(PACKED, ERROR, reason=POOL_DOWN))
    head = run(failing(GATE, "c3"), verdict(PARITY, ERROR, reason=POOL_DOWN), verdict(PACKED))
    decision = compare.compare(base, head, base_side, head_side, replay=fake_replay({}))
    outcomes = {row.id: row.outcome for row in decision.rows}
    assert outcomes == {GATE: ERROR, PARITY: ERROR, PACKED: PASS}
    assert not decision.new_failures and decision.exit_code == EXIT_UNDECIDED
    reasons = {e.id: e.reason for e in decision.errors}
    assert reasons[GATE].startswith("the base could not be decided") and reasons[PARITY].startswith("the PR could")


def test_hang_that_does_not_reproduce_becomes_error():
    """A deterministic hang replays as a hang and stays FAIL; a deadline missed under load replays PASS."""
    real, flaky = failing(GATE, "c1", kind=HANG), failing(PARITY, "c2", kind=HANG)
    plain = failing(SPECIAL, "c3", HARDENING)
    result = run(real, flaky, plain)
    replay = fake_replay({("head", "c1"): FAIL, ("head", "c2"): PASS})
    assert retries.confirm_hangs(result, "T", {"side": "head"}, replay=replay) == [PARITY]
    assert [case for _, items in replay.calls for _, case, _ in items] == ["c1", "c2"]  # only the hangs replayed
    assert result.verdicts[GATE].outcome == FAIL and result.verdicts[SPECIAL].outcome == FAIL
    assert result.verdicts[PARITY].outcome == ERROR and "did not reproduce" in result.verdicts[PARITY].reason


def test_errors_are_rerun_once_and_replaced():
    result = run(verdict(GATE, ERROR, reason=POOL_DOWN), verdict(PARITY, ERROR, reason=POOL_DOWN), verdict(PACKED))
    asked = []

    def rerun(ids):
        asked.append(ids)
        return run(verdict(GATE), verdict(PARITY, ERROR, reason=POOL_DOWN))

    assert retries.rerun_errors(result, rerun) == sorted([GATE, PARITY])
    assert asked == [sorted([GATE, PARITY])]
    assert {k: v.outcome for k, v in result.verdicts.items()} == {GATE: PASS, PARITY: ERROR, PACKED: PASS}
    assert retries.rerun_errors(run(verdict(GATE)), rerun) == [] and len(asked) == 1
    # Code that could not be loaded would fail to load again: not rerun.
    unloadable = replace(verdict(GATE, ERROR, reason="MissingUpstream: no loss.py"), kind=failure.LOAD)
    assert retries.rerun_errors(run(unloadable), rerun) == [] and len(asked) == 1


def test_reports_and_summary(tmp_path):
    base_side, head_side = sides()
    base = run(verdict(GATE), verdict(PACKED))
    head = run(failing(GATE, "c3"), verdict(PACKED, UNSUPPORTED, reason="does not support ['packed', 'cp_zigzag']"))
    decision = compare.compare(base, head, base_side, head_side, replay=fake_replay({("base", "c3"): PASS}))
    decision.write(tmp_path)
    gate = json.loads((tmp_path / GATE_FILE).read_text())
    assert [e["id"] for e in gate["new_failures"]] == [GATE] and gate["new_failures"][0]["tier"] == CONTRACT
    assert gate["exit_code"] == 1 and gate["fixed"] == [] and gate["still_failing"] == []
    summary = (tmp_path / SUMMARY_FILE).read_text()
    assert summary.splitlines()[0].endswith("RED, 1 blocking (gated tiers: contract, budget, hardening)")
    assert summary.index(f"### BLOCKING `{GATE}`") < summary.index("- tier: **contract**") < summary.index(CASE)
    assert "python -m harness.replay" in summary
    assert any("coverage lost" in note for note in decision.notes)


def test_tables_put_named_regressions_first_and_collapse_unsupported():
    rows = [
        Row(PARITY, CONTRACT, "FAIL", "grad"),
        Row(SPECIAL, HARDENING, "KNOWN", "NaN"),
        Row(GATE, CONTRACT, "FAIL", "gate"),
        Row(MEMORY, BUDGET, "PASS"),
        Row(PACKED, CONTRACT, UNSUPPORTED, missing=("packed",)),
        Row(PACKED + "2", CONTRACT, UNSUPPORTED, missing=("packed",)),
    ]
    text = markdown(rows, "t")
    order = [text.index(f"## {name}") for name in ("named regressions", "contract", "budget", "hardening")]
    assert order == sorted(order) and text.index(GATE) < text.index(PARITY)
    assert "- needs packed: 2 checks" in text and text.count(PACKED + "2") == 1
    lines = terminal_lines(rows)
    assert lines[0] == "-- named regressions --" and "UNSUPPORTED   needs packed: 2 checks" in lines


# ---- SPECs ----------------------------------------------------------------------------------------


def test_specs(tmp_path):
    assert specs.resolve("impl").target == "impl" and specs.resolve("impl-triton").target == "impl-triton"
    pypi = specs.resolve("skyrl==0.3.0")
    assert pypi.slug == "skyrl-0.3.0" and pypi.pip_requirement == "skyrl==0.3.0" and pypi.family == "skyrl"
    assert pypi.env["LPH_SKYRL_PATH"].endswith("skyrl-0.3.0")
    checkout = specs.resolve(f"slime={tmp_path}")
    assert checkout.env == {"LPH_SLIME_PATH": str(tmp_path)} and checkout.family == "slime"
    assert specs.resolve("mutant=one_hot_backward").env == {"LPH_MUTANT": "one_hot_backward"}
    assert specs.resolve("my/adapter.py:Mine").target == "my/adapter.py:Mine"
    for bad, message in [("slime=/no/such/dir", "not a directory"), ("cuda", "unknown SPEC"), ("mutant=nope", "nope")]:
        with pytest.raises(ValueError, match=message):
            specs.resolve(bad)


def test_a_hang_where_a_rank_finished_is_not_replayed():
    """A rank that finished without joining the collective its peers waited in proves the hang: no replay."""
    proven = failing(GATE, "c1", kind=HANG, diverged=True)
    timed_out = failing(PARITY, "c2", kind=HANG)
    result = run(proven, timed_out)
    replay = fake_replay({("head", "c1"): PASS, ("head", "c2"): FAIL})
    assert retries.confirm_hangs(result, "T", {"side": "head"}, replay=replay) == []
    assert [case for _, items in replay.calls for _, case, _ in items] == ["c2"]
    assert result.verdicts[GATE].outcome == FAIL and result.verdicts[PARITY].outcome == FAIL


def test_a_group_holding_a_true_defect_is_judged_by_the_defect():
    """Hypothesis reports a precision-only failure beside a contract one: the verdict is the contract one's."""
    precise = failure.mark(failure.CheckFailure("rounding", kind=failure.PRECISION), check=CHECK, case="c1")
    wrong = failure.mark(failure.CheckFailure("wrong", kind=failure.VALUE), check=CHECK, case="c2")
    for leaves in ([precise, wrong], [wrong, precise]):
        verdict = _verdict_of(ExceptionGroup("two", leaves))
        assert (verdict.kind, verdict.tier, verdict.case) == (failure.VALUE, CONTRACT, "c2")
    alone = _verdict_of(precise)
    assert (alone.kind, alone.tier) == (failure.PRECISION, HARDENING)  # rounding alone is never a contract red


def test_a_replay_line_of_a_mutant_run_sets_the_mutant(monkeypatch):
    """Pasted without ``LPH_MUTANT`` a mutant's replay would run unmutated impl and pass."""
    from harness.cases.case import Case
    from harness.checks.running import replay_command

    case = Case.from_json('{"samples": [[4, 2]], "vocab": 8, "seed": 1}')
    monkeypatch.delenv("LPH_MUTANT", raising=False)
    assert replay_command("harness.checks.parity:check_token_forward", case, "impl").startswith("python -m harness")
    monkeypatch.setenv("LPH_MUTANT", "inverted_no_grad_gate")
    line = replay_command("harness.checks.parity:check_token_forward", case, "impl")
    assert line.startswith("LPH_MUTANT=inverted_no_grad_gate python -m harness.replay ")
    verdict = pytest_plugin._raw_verdict(_Report("failed", failure.Facts(headline="x")), "impl")
    assert verdict.replay.startswith("LPH_MUTANT=inverted_no_grad_gate python -m pytest ")
    assert verdict.replay.endswith("--target impl")
