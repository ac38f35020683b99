"""Base vs PR (the crater model): NEW FAIL / FIXED / STILL FAILING / PASS, with replays and figures.

Both sides run the same derandomised suite. Then:

* every counterexample one side found where the other side passed is
  replayed on the other side (``replays``): a PR failure the base also fails
  on that Case is pre-existing (STILL FAILING), not new; a base failure the
  PR still fails on that Case is not FIXED;
* budget checks compare their measured figure (peak / logits bytes) when both
  sides measured it on the same case: a rise above ``BUDGET_MARGIN`` is a
  NEW FAIL even where both sides exceed our bound, a drop below it is
  IMPROVED; a pass/fail verdict alone cannot see "worse";
* a check the base could not run (UNSUPPORTED: the PR adds the capability)
  that fails on the PR is NEW FAIL: it is the PR's code;
* a check either side could not decide (ERROR: infrastructure) is ERROR
  when the PR does not pass it: no verdict, never a NEW FAIL;
* a check both sides fail, but in another way (the verdicts' failure
  ``kind`` differs: a wrong value on the base, a hang on the PR) is FAILS
  DIFFERENTLY, a new failure, unless the base fails the PR's counterexample
  the same way when it is replayed there, or the base never returned
  (``UNMASKING``): a base that raised or hung could not show the wrong
  value, gradient or graph the PR's run now reaches, so a PR that fixes a
  crash and exposes what the crash hid is STILL FAILING ("unmasked"), not
  blocked; a PR that turns any failure into a hang (or a diverging
  collective sequence) stays FAILS DIFFERENTLY. Replaying slime's history
  and TransformerEngine's releases blocked exactly such fixes (a crash fix
  exposing an older in-place write or CP re-grad defect) before this rule.

In this mode every tier is gated by default: the base is the reference, so
anything new is the PR's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.checks import failure
from harness.gate.decision import Decision, Entry, entry, row
from harness.gate.replays import REPLAY_TIMEOUT_S, Replayed, replay_in_subprocess
from harness.gate.tiers import TIERS
from harness.gate.verdicts import ERROR, FAIL, HANG, PASS, UNSUPPORTED, Run, Verdict

NEW_FAIL, FIXED, STILL_FAILING, IMPROVED = "NEW FAIL", "FIXED", "STILL FAILING", "IMPROVED"
FAILS_DIFFERENTLY = "FAILS DIFFERENTLY"
BUDGET_MARGIN = 0.05  # relative change of a measured figure that counts as worse / improved
# A base failing as one of these did not return its outputs: what its outputs would have shown is unknown.
DID_NOT_RETURN = frozenset({failure.ERROR, HANG, failure.CRASH})
# A PR failing as one of these stops (or is about to stop) a training job: new whatever the base did.
HANG_CLASS = frozenset({HANG, failure.COLLECTIVES, failure.CRASH})


@dataclass
class Side:
    """One side of a comparison: its label, adapter spec and the environment its target needs."""

    label: str
    target: str
    env: dict = field(default_factory=dict)


def _figure_changes(base: Verdict, head: Verdict) -> list[tuple[str, float, float]]:
    """(name, base value, head value) for every budget figure both measured on the same case.

    A verdict's figures hold two kinds: the budget figures a memory check records (``{"value", "case"}``,
    ``harness/checks/record.py``) and the plain numbers a failure carries (``max_error``, ``bound``,
    ``differing``); only the first are comparable across sides.
    """
    changes = []
    for name, measured in sorted(head.figures.items()):
        before = base.figures.get(name)
        if isinstance(before, dict) and isinstance(measured, dict) and before["case"] == measured["case"]:
            changes.append((name, before["value"], measured["value"]))
    return changes


def _describe(changes) -> str:
    return "; ".join(f"{name} {b:.4g} -> {h:.4g} ({(h / b - 1) * 100:+.1f}%)" for name, b, h in changes if b)


def _worse(changes) -> bool:
    return any(b > 0 and h > b * (1 + BUDGET_MARGIN) for _, b, h in changes)


def _better(changes) -> bool:
    return any(b > 0 and h < b * (1 - BUDGET_MARGIN) for _, b, h in changes)


def _replays_needed(base: dict, head: dict) -> tuple[list, list]:
    """(PR counterexamples to run on the base, base counterexamples to run on the PR)."""
    on_base, on_head = [], []
    for key, h in head.items():
        b = base.get(key)
        if b is None:
            continue
        if h.outcome == FAIL and (b.outcome == PASS or (_differs(b, h) and not _unmasked(b, h))) and h.replayable:
            on_base.append((h.check, h.case))
        if b.outcome == FAIL and h.outcome == PASS and b.replayable:
            on_head.append((b.check, b.case))
    return on_base, on_head


def _differs(b: Verdict, h: Verdict) -> bool:
    """Both failed, in different ways (a verdict without a kind, from an older run, differs in none)."""
    return b.outcome == FAIL and h.outcome == FAIL and bool(b.kind and h.kind) and b.kind != h.kind


def _unmasked(b: Verdict, h: Verdict) -> bool:
    """The base did not return (raised or hung) and the PR, which does, fails on what it returned."""
    return b.kind in DID_NOT_RETURN and h.kind not in HANG_CLASS and h.kind != b.kind


def _hang(verdict: Verdict) -> str:
    return " (hang)" if verdict.kind == HANG else ""


def compare(
    base_run: Run,
    head_run: Run,
    base: Side,
    head: Side,
    *,
    tiers=TIERS,
    replay=replay_in_subprocess,
) -> Decision:
    """Classify every check of ``head_run`` against ``base_run`` (see the module docstring)."""
    base_checks, head_checks = base_run.checks(), head_run.checks()
    on_base, on_head = _replays_needed(base_checks, head_checks)
    replayed: dict[tuple[str, str, str], Replayed] = {}
    for side, items in ((base, on_base), (head, on_head)):
        for result in replay(items, side.target, side.env, REPLAY_TIMEOUT_S):
            replayed[(side.label, result.check, result.case)] = result
    title = f"`{head.label}` vs base `{base.label}`"
    decision = Decision(mode="base-vs-pr", title=title, tiers=tuple(tiers))
    for key in sorted(head_checks):
        h, b = head_checks[key], base_checks.get(key)
        _classify(decision, b, h, base, head, replayed)
    for key in sorted(set(base_checks) - set(head_checks)):
        decision.notes.append(f"`{key}` ran on the base but not on the PR")
    return decision


def _classify(decision: Decision, b: Verdict | None, h: Verdict, base: Side, head: Side, replayed: dict) -> None:
    changes = _figure_changes(b, h) if b is not None else []
    figures = _describe(changes)
    if h.outcome == ERROR or (h.outcome == FAIL and b is not None and b.outcome == ERROR):
        undecided = h if h.outcome == ERROR else b
        side = "the PR" if h.outcome == ERROR else "the base"
        detail = f"{side} could not be decided: {undecided.reason}"
        decision.rows.append(row(h, ERROR, detail))
        decision.errors.append(entry(h, detail))
        return
    if h.outcome == FAIL:
        if b is not None and _differs(b, h) and _unmasked(b, h):
            detail = f"unmasked: the base failed as {b.kind} before its outputs were checked, the PR as {h.kind}: "
            detail += h.reason
            decision.rows.append(row(h, STILL_FAILING, detail))
            decision.still_failing.append(entry(h, detail))
            return
        if b is not None and _differs(b, h):
            result = replayed.get((base.label, h.check, h.case)) if h.replayable else None
            if result is None or result.outcome != FAIL or result.kind != h.kind:
                reason = f"the base fails as {b.kind}, the PR as {h.kind}: {h.reason}"
                decision.rows.append(row(h, FAILS_DIFFERENTLY, reason))
                decision.new_failures.append(entry(h, reason))
                return
        if b is not None and b.outcome == FAIL:
            if _worse(changes):
                reason = f"worse than the base: {figures}: {h.reason}"
                decision.rows.append(row(h, NEW_FAIL + _hang(h), reason))
                decision.new_failures.append(entry(h, reason))
                return
            outcome = IMPROVED if _better(changes) else STILL_FAILING
            detail = f"{figures}: {h.reason}" if figures else h.reason
            decision.rows.append(row(h, outcome + _hang(h), detail))
            decision.still_failing.append(entry(h))
            if outcome == IMPROVED:
                decision.improved.append(Entry(h.id, h.tier, figures))
            return
        if b is not None and b.outcome == PASS and h.replayable:
            result = replayed.get((base.label, h.check, h.case))
            if result is not None and result.outcome == FAIL:
                detail = f"pre-existing: the base fails the PR's counterexample too ({result.reason}): {h.reason}"
                decision.rows.append(row(h, STILL_FAILING + _hang(h), detail))
                decision.still_failing.append(entry(h, detail))
                return
            if result is not None and result.outcome != PASS:
                decision.notes.append(f"`{h.id}`: replay on the base gave {result.outcome}: {result.reason}")
        base_said = "" if b is None or b.outcome in (PASS, FAIL) else f" (the base: {b.outcome})"
        decision.rows.append(row(h, NEW_FAIL + _hang(h), h.reason + base_said))
        decision.new_failures.append(entry(h, h.reason + base_said))
        return
    if h.outcome == PASS and b is not None and b.outcome == FAIL:
        result = replayed.get((head.label, b.check, b.case)) if b.replayable else None
        if result is not None and result.outcome == FAIL:
            detail = f"the PR's run passed, but it fails the base's counterexample: {result.reason}"
            decision.rows.append(row(h, STILL_FAILING, detail))
            decision.still_failing.append(Entry(h.id, h.tier, detail, b.case, b.replay))
            return
        decision.rows.append(row(h, FIXED, f"the base failed: {b.reason}"))
        decision.fixed.append(entry(b))
        return
    if h.outcome == UNSUPPORTED and b is not None and b.outcome in (PASS, FAIL):
        decision.notes.append(f"`{h.id}`: {b.outcome} on the base, UNSUPPORTED on the PR (coverage lost)")
    decision.rows.append(row(h, h.outcome))
