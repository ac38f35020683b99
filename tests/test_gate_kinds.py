"""How a check fails is part of its expectation: kinds, version conditions, FAILS DIFFERENTLY in both modes.

Hand-made verdicts, as in tests/test_gate.py; the end-to-end case (a stand-in
whose known wrong value becomes a hang) is in tests/test_gate_cli.py.
"""

import itertools
import subprocess

import pytest

from harness.checks import failure, signature
from harness.gate import compare, expectations, retries, single
from harness.gate.compare import Side
from harness.gate.replays import Replayed
from harness.gate.tiers import CONTRACT
from harness.gate.verdicts import FAIL, HANG, PASS, Run, Verdict

PARITY = "properties/test_backward_parity.py::test_token_backward_parity"
GATE = "regressions/test_inverted_no_grad_gate.py::test_requires_grad_equals_gate_and_gradient_matches_oracle"
CHECK = "harness.checks.parity:check_token_backward"


def failing(id, case, kind, tier=CONTRACT) -> Verdict:
    return Verdict(id, FAIL, tier, reason=f"{kind} on {case}", kind=kind, check=CHECK, case=case, replay="r")


def run(*verdicts) -> Run:
    return Run("t", {v.id: v for v in verdicts})


def known(id, kind="", **conditions) -> expectations.Expectation:
    return expectations.Expectation(id, "upstream bug", kind=kind, **conditions)


def test_single_mode_a_known_failure_of_another_kind_is_its_own_outcome():
    result = run(failing(PARITY, "c1", HANG), failing(GATE, "c2", failure.GRAPH))
    expected = {(PARITY, None): known(PARITY, failure.VALUE), (GATE, None): known(GATE, failure.GRAPH)}
    decision = single.classify(result, expected)
    outcomes = {row.id: row.outcome for row in decision.rows}
    assert outcomes == {PARITY: "FAILS DIFFERENTLY", GATE: "KNOWN"}
    assert [e.id for e in decision.changed] == [PARITY] and "now fails as hang" in decision.changed[0].reason
    assert decision.exit_code == 0  # listed, not red: the expectation file is stale, not the PR
    assert single.classify(result, expected, strict=True).exit_code == 1
    # An entry without a kind accepts any failure (files written before kinds existed).
    assert single.classify(result, {(PARITY, None): known(PARITY), (GATE, None): known(GATE)}).changed == []


def _replay_answering(outcome, kind):
    calls = []

    def replay(items, target, env, timeout_s):
        calls.append((env.get("side"), list(items)))
        return [Replayed(check, case, outcome, "replayed", kind, options=options) for check, case, options in items]

    replay.calls = calls
    return replay


def test_base_vs_pr_a_failure_that_changes_kind_is_red_unless_the_base_fails_that_case_alike():
    base_side, head_side = Side("base", "T", {"side": "base"}), Side("head", "T", {"side": "head"})
    base, head = run(failing(PARITY, "c1", failure.VALUE)), run(failing(PARITY, "c2", HANG))
    replay = _replay_answering(FAIL, failure.VALUE)  # the base fails the PR's case, but as a wrong value
    decision = compare.compare(base, head, base_side, head_side, replay=replay)
    assert [row.outcome for row in decision.rows] == ["FAILS DIFFERENTLY"] and decision.exit_code == 1
    assert "the base fails as value, the PR as hang" in decision.new_failures[0].reason
    assert replay.calls[0] == ("base", [(CHECK, "c2", "")])  # the PR's counterexample, replayed on the base
    same = compare.compare(base, head, base_side, head_side, replay=_replay_answering(FAIL, HANG))
    assert [row.outcome for row in same.rows] == ["STILL FAILING (hang)"] and same.exit_code == 0
    alike = compare.compare(base, run(failing(PARITY, "c2", failure.VALUE)), base_side, head_side, replay=replay)
    assert [row.outcome for row in alike.rows] == ["STILL FAILING"]


def test_base_vs_pr_a_pr_that_fixes_a_crash_and_exposes_a_defect_is_still_failing_not_blocked():
    """A base that raised (or hung) never showed its outputs: the PR's wrong graph is unmasked, not new.

    slime's #214 fixed an in-place crash and exposed the CP re-grad defect the crash hid; TransformerEngine's
    v2.7 fixed a backward's arity and exposed an older write into the logits: both read as blocked before.
    """
    base_side, head_side = Side("base", "T", {"side": "base"}), Side("head", "T", {"side": "head"})
    replay = _replay_answering(FAIL, failure.ERROR)
    for base_kind in (failure.ERROR, HANG):
        base, head = run(failing(PARITY, "c1", base_kind)), run(failing(PARITY, "c2", failure.GRAPH))
        decision = compare.compare(base, head, base_side, head_side, replay=replay)
        assert [row.outcome for row in decision.rows] == ["STILL FAILING"] and decision.exit_code == 0
        assert decision.still_failing[0].reason.startswith(f"unmasked: the base failed as {base_kind}")
    assert all(items == [] for _, items in replay.calls)  # nothing replayed: the base could not show it
    # Toward a hang (or a diverging collective sequence) is new whatever the base did, and so is a new crash.
    for base_kind, head_kind in (
        (failure.ERROR, HANG),
        (failure.ERROR, failure.COLLECTIVES),
        (failure.VALUE, failure.ERROR),
    ):
        base, head = run(failing(PARITY, "c1", base_kind)), run(failing(PARITY, "c2", head_kind))
        same_as_before = _replay_answering(FAIL, base_kind)  # the base fails the PR's case its own way
        decision = compare.compare(base, head, base_side, head_side, replay=same_as_before)
        assert [row.outcome for row in decision.rows] == ["FAILS DIFFERENTLY"] and decision.exit_code == 1


def test_a_hang_that_replays_as_another_failure_takes_that_failure():
    """Under load a crash can miss the deadline first: replayed alone, the verdict becomes the crash it is."""
    result = run(failing(PARITY, "c1", HANG))
    assert retries.confirm_hangs(result, "T", {}, replay=_replay_answering(FAIL, failure.ERROR)) == [PARITY]
    verdict = result.verdicts[PARITY]
    assert (verdict.outcome, verdict.kind) == (FAIL, failure.ERROR) and "not a hang" in verdict.reason
    result = run(failing(PARITY, "c1", HANG))
    assert retries.confirm_hangs(result, "T", {}, replay=_replay_answering(FAIL, HANG)) == []
    assert result.verdicts[PARITY].kind == HANG


def test_expectation_kinds_are_validated_and_written_back(tmp_path):
    path = tmp_path / "e.toml"
    path.write_text(f'[[known]]\nid = "{PARITY}"\nkind = "valu"\nreason = "x"\n')
    with pytest.raises(ValueError, match="kind 'valu'"):
        expectations.load(path)
    path.write_text(f'[[known]]\nid = "{PARITY}"\nreason = "x"\nversions = "<0.4"\nlink = "l"\n')
    previous = expectations.load(path)
    path.write_text(expectations.render(run(failing(PARITY, "c", failure.GRADIENT)), previous, "h"))
    entry = expectations.load(path)[(PARITY, "")]  # rewritten per output: the check as a whole failed
    assert (entry.kind, entry.versions, entry.reason, entry.link) == (failure.GRADIENT, "<0.4", "x", "l")
    path.write_text(f'[[known]]\nid = "{PARITY}"\nreason = "x"\nversions = "not a range"\n')
    with pytest.raises(ValueError, match="PEP 440"):
        expectations.load(path)


def test_version_conditions_select_the_entries_of_a_release():
    entries = {(PARITY, None): known(PARITY, versions="<0.4"), (GATE, None): known(GATE)}
    kept, notes = expectations.applicable(entries, expectations.Revision(version="0.3.0"))
    assert set(kept) == {(PARITY, None), (GATE, None)} and not notes
    kept, _ = expectations.applicable(entries, expectations.Revision(version="0.4.1"))
    assert set(kept) == {(GATE, None)}
    kept, notes = expectations.applicable(entries, expectations.Revision())
    assert set(kept) == {(PARITY, None), (GATE, None)} and "not evaluated" in notes[0]


def test_commit_conditions_select_the_entries_of_a_checkout(tmp_path):
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one")
    first = git("rev-parse", "HEAD").strip()
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "fix")
    fix = git("rev-parse", "HEAD").strip()
    entries = {(PARITY, None): known(PARITY, before=fix)}
    assert expectations.applicable(entries, expectations.Revision(checkout=str(tmp_path)))[0] == {}
    git("checkout", "-q", first)
    assert set(expectations.applicable(entries, expectations.Revision(checkout=str(tmp_path)))[0]) == {(PARITY, None)}


def test_device_conditions_select_the_entries_of_a_device_type(tmp_path):
    entries = {(PARITY, None): known(PARITY, device="cpu"), (GATE, None): known(GATE)}
    kept, notes = expectations.applicable(entries, expectations.Revision(version="1.0", device="cpu"))
    assert set(kept) == {(PARITY, None), (GATE, None)} and not notes
    kept, _ = expectations.applicable(entries, expectations.Revision(version="1.0", device="cuda"))
    assert set(kept) == {(GATE, None)}
    kept, notes = expectations.applicable(entries, expectations.Revision())
    assert set(kept) == {(PARITY, None), (GATE, None)} and "not evaluated" in notes[0]
    path = tmp_path / "e.toml"
    path.write_text(f'[[known]]\nid = "{PARITY}"\nreason = "x"\ndevice = "cpu"\n')
    assert expectations.load(path)[(PARITY, None)].device == "cpu"
    path.write_text(expectations.render(run(failing(PARITY, "c", failure.GRADIENT)), expectations.load(path), "h"))
    assert expectations.load(path)[(PARITY, "")].device == "cpu"  # kept on a rewrite
    path.write_text(f'[[known]]\nid = "{PARITY}"\nreason = "x"\ndevice = "gpu"\n')
    with pytest.raises(ValueError, match="device 'gpu' is none of"):
        expectations.load(path)


def test_shipped_expectations_carry_the_failure_kind_of_every_entry():
    paths = sorted(expectations.EXPECTATIONS_DIR.glob("*.toml"))
    assert paths
    for path in paths:
        for entry in expectations.load(path).values():
            assert entry.kind in failure.FAILURE_KINDS, f"{path}: {entry.id} lacks its failure kind"
    passing = run(Verdict(PARITY, PASS, CONTRACT))
    assert single.classify(passing, {(PARITY, None): known(PARITY, failure.VALUE)}).fixed


# ---- failure signatures (harness/checks/signature.py) ---------------------------------------------------


def test_a_signature_masks_numbers_paths_and_addresses_but_keeps_the_words():
    one = signature.message_class("RankError: job x on rank(s) [1]: RuntimeError: got 5, expected 6 at /tmp/a/b.py")
    two = signature.message_class("RankError: job x on rank(s) [0]: RuntimeError: got 4, expected 6 at /tmp/c/d.py")
    other = signature.message_class("RankError: job x on rank(s) [1]: RuntimeError: modified by an inplace operation")
    assert one == two != other and "RankError" not in one


def test_magnitude_classes_follow_the_error_against_the_reference():
    assert signature.magnitude_class({"max_error": float("inf"), "reference": 3.0}) == "non-finite"
    assert signature.magnitude_class({"max_error": 1.0, "reference": 3.0, "bound": 1e-6}) == "large"
    assert signature.magnitude_class({"max_error": 1e-3, "reference": 3.0, "bound": 1e-6}) == "small"
    assert signature.magnitude_class({}) == ""  # an exception, a flag: nothing measured


def test_signatures_match_unless_a_field_differs_or_the_failure_grew():
    base = {"kind": "value", "exception": "CheckFailure", "message": "m", "magnitude": "large", "needs": ["tp"]}
    assert signature.matches(base, dict(base))
    assert signature.matches({"kind": "value"}, base)  # an expectation leaving fields out accepts them
    assert not signature.matches(base, {**base, "exception": "RankError"})
    assert not signature.matches(base, {**base, "magnitude": "non-finite"})  # worse
    assert signature.matches(base, {**base, "magnitude": "small"})  # the same defect, smaller: narrowed
    assert not signature.matches(base, {**base, "needs": [], "independent": ["tp"]})  # fails without tp now: wider
    narrower = {**base, "needs": ["tp", "dtype"]}
    assert signature.matches({**base, "independent": ["dtype"]}, narrower)  # fp32 fixed, bf16 left: a partial fix
    assert signature.matches(base, {**base, "needs": []})  # undetermined on one side contradicts nothing
    assert "magnitude small -> large" in signature.differences({**base, "magnitude": "small"}, base)
    assert "now needs dtype" in signature.differences({**base, "independent": ["dtype"]}, narrower)
    # One hang read by either detector (seen in NeMo-RL's history at #1349: a NEW FAIL that changed nothing).
    deadline = {"kind": "hang", "exception": "RankHang", "message": "job ... did not finish within # s"}
    unjoined = {"kind": "hang", "exception": "CollectiveHang", "message": "rank(s) [#] waited # s in a collective"}
    assert signature.matches(deadline, unjoined) and signature.matches(unjoined, deadline)
    assert not signature.matches(deadline, {**unjoined, "kind": "error", "exception": "RankError"})


def _rank_error(world: str, cause: str) -> dict:
    """A RankError's signature as signature.of writes it: the job, the failing ranks, the rank's exception."""
    headline = f"RankError: job harness.jobs.logits:policy_job on a world of 4 (tp=2, cp=2) failed on rank(s) {world}: "
    return signature.of({"kind": "error", "headline": headline + "rank 0: " + cause})


INPLACE = "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation"


def test_an_exception_a_rank_raised_is_the_same_failure_raised_in_process():
    """verl's history at #3439 and #3608: the parent's failure, replayed alone after a false hang, was read through
    a rank, the commit's in process; the same error on both sides read as a NEW FAIL."""
    in_process = signature.of({"kind": "error", "headline": INPLACE})
    two, four = _rank_error("[0, 1]", INPLACE), _rank_error("[0, 1, 2, 3]", INPLACE)
    assert two["message"] != four["message"] != in_process["message"]  # cut at MESSAGE_CHARS in three places
    for expected, found in itertools.permutations((in_process, two, four), 2):
        assert signature.matches(expected, found), (expected, found)
        assert signature.differences(expected, found) == ""
    other = _rank_error("[0, 1]", "ValueError: response_mask must contain at least one valid token")
    killed = _rank_error("[0]", "rank process was killed by signal SIGABRT")
    reworded = signature.of({"kind": "error", "headline": "RuntimeError: one of the variables was freed"})
    for different in (other, killed, reworded):
        assert not signature.matches(two, different) and not signature.matches(different, in_process)
    assert signature.differences(two, other).startswith("message job ")
    assert signature.matches({"kind": "error", "exception": "RankError"}, killed)  # the exception alone: any rank's
    assert signature.matches({"kind": "error", "exception": "RankError"}, two)
    short = {**in_process, "message": in_process["message"][: signature.SHORTEST_CUT - 1]}
    assert not signature.matches(short, in_process)  # too short a beginning to call it the same message
