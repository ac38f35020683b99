"""Base vs PR (the crater model): NEW FAIL / FIXED / STILL FAILING / PASS per output, with replays and figures.

Both sides run the same derandomised suite. Then every output of every
check (``harness/gate/units.py``: log-probs, entropy, the loss, each
gradient, the graph flags, the collectives, the inputs; or the check as a
whole) is classified on its own, so a fix of one output behind a persistent
failure of another reads FIXED for that output, and a new failure of a
second output of an already failing check reads NEW FAIL:

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
* an output both sides fail, but with different signatures
  (``harness/checks/signature.py``: another kind, exception type, message
  class or error magnitude, or contradicting conditions: a wrong value on
  the base, a hang on the PR; one exception turned into another) is FAILS
  DIFFERENTLY, a new failure, unless the base fails the PR's counterexample
  the same way when it is replayed there, or the base never returned
  (unmasking): a base that raised or hung as a whole could not show the
  wrong value, gradient or graph the PR's run now reaches, so a PR that
  fixes a crash and exposes what the crash hid is STILL FAILING
  ("unmasked"), not blocked; a PR that turns any failure into a hang (or a
  diverging collective sequence, or a killed process) stays FAILS
  DIFFERENTLY, and so does a PR whose check now raises where the base
  returned wrong outputs. Replaying slime's history and TransformerEngine's
  releases blocked exactly such fixes (a crash fix exposing an older in-place
  write or CP re-grad defect) before this rule;
* an output the base failed and the PR's check did not reach (it failed as
  a whole before) is a note, neither FIXED nor STILL FAILING.

In this mode every tier is gated by default: the base is the reference, so
anything new is the PR's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.checks import failure, signature
from harness.checks.subtests import CHECK
from harness.gate.decision import Decision, Entry, entry, row
from harness.gate.replays import REPLAY_TIMEOUT_S, Replayed, replay_in_subprocess
from harness.gate.tiers import TIERS
from harness.gate.units import MASKED, UNJUDGED, Unit, state, units_of, whole
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


def _figure_changes(base: dict, head: dict) -> list[tuple[str, float, float]]:
    """(name, base value, head value) for every budget figure both measured on the same case.

    A verdict's figures hold two kinds: the budget figures a memory check records (``{"value", "case"}``,
    ``harness/checks/record.py``) and the plain numbers a failure carries (``max_error``, ``bound``,
    ``differing``); only the first are comparable across sides.
    """
    changes = []
    for name, measured in sorted(head.items()):
        before = base.get(name)
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
    """(PR counterexamples to run on the base, base counterexamples to run on the PR), one per check and Case:
    wherever an output fails on one side and is not known to fail the same way on the other."""
    on_base, on_head = [], []
    for key, h in head.items():
        b = base.get(key)
        if b is None:
            continue
        outputs = {unit.output for unit in units_of(h) + units_of(b)}
        for output in outputs:
            h_state, h_unit = state(h, output)
            b_state, b_unit = state(b, output)
            comparable = b.outcome in (PASS, FAIL) and h.replayable
            if h_state == FAIL and comparable and not (b_state == FAIL and _same(b_unit, h_unit)):
                if not _unmasked(b, b_state, b_unit, h_unit):
                    on_base.append(h.call)
            if b_state == FAIL and h_state in (PASS, UNJUDGED) and h.outcome != ERROR and b.replayable:
                on_head.append(b.call)
    return list(dict.fromkeys(on_base)), list(dict.fromkeys(on_head))


def _same(b: Unit, h: Unit) -> bool:
    """Both failed the same way: their signatures match (a verdict without one, from an older run, by kind)."""
    if not (b.signature and h.signature):
        return not (b.kind and h.kind) or b.kind == h.kind
    return signature.matches({**b.signature, "kind": b.kind}, {**h.signature, "kind": h.kind})


def _unmasked(b: Verdict, b_state: str, b_unit: Unit | None, h_unit: Unit) -> bool:
    """The base did not return (raised, hung or crashed as a whole); the PR, which does, fails on what it returned."""
    if b_unit is None or b_state not in (FAIL, MASKED) or b_unit.output != CHECK:
        return False
    if h_unit.kind in HANG_CLASS or h_unit.kind == b_unit.kind:
        return False
    return b_unit.kind in DID_NOT_RETURN and (b_state == MASKED or h_unit.output == CHECK)


def _hang(unit: Unit) -> str:
    return " (hang)" if unit.kind == HANG else ""


def compare(
    base_run: Run,
    head_run: Run,
    base: Side,
    head: Side,
    *,
    tiers=TIERS,
    replay=replay_in_subprocess,
) -> Decision:
    """Classify every output of every check of ``head_run`` against ``base_run`` (see the module docstring)."""
    base_checks, head_checks = base_run.checks(), head_run.checks()
    on_base, on_head = _replays_needed(base_checks, head_checks)
    replayed: dict[tuple[str, ...], Replayed] = {}
    for side, items in ((base, on_base), (head, on_head)):
        for result in replay(items, side.target, side.env, REPLAY_TIMEOUT_S):
            replayed[(side.label, *result.call)] = result
    title = f"`{head.label}` vs base `{base.label}`"
    decision = Decision(mode="base-vs-pr", title=title, tiers=tuple(tiers))
    for key in sorted(head_checks):
        h, b = head_checks[key], base_checks.get(key)
        _classify(decision, b, h, Sides(base, head, replayed))
    for key in sorted(set(base_checks) - set(head_checks)):
        decision.notes.append(f"`{key}` ran on the base but not on the PR")
    return decision


@dataclass
class Sides:
    base: Side
    head: Side
    replayed: dict

    def on_base(self, h: Verdict, output: str) -> tuple[str, dict]:
        """The PR's counterexample replayed on the base: (state of ``output``, its FAIL entry)."""
        result = self.replayed.get((self.base.label, *h.call)) if h.replayable else None
        return ("", {}) if result is None else result.output(output)

    def on_head(self, b: Verdict, output: str) -> tuple[str, dict]:
        result = self.replayed.get((self.head.label, *b.call)) if b.replayable else None
        return ("", {}) if result is None else result.output(output)

    def replay_note(self, h: Verdict) -> str:
        result = self.replayed.get((self.base.label, *h.call)) if h.replayable else None
        if result is not None and result.outcome not in (PASS, FAIL):
            return f"`{h.id}`: replay on the base gave {result.outcome}: {result.reason}"
        return ""


def _classify(decision: Decision, b: Verdict | None, h: Verdict, sides: Sides) -> None:
    if h.outcome == ERROR or (h.outcome == FAIL and b is not None and b.outcome == ERROR):
        undecided = h if h.outcome == ERROR else b
        side = "the PR" if h.outcome == ERROR else "the base"
        detail = f"{side} could not be decided: {undecided.reason}"
        decision.rows.append(row(whole(h), ERROR, detail))
        decision.errors.append(entry(whole(h), detail))
        return
    if h.outcome not in (PASS, FAIL):
        if h.outcome == UNSUPPORTED and b is not None and b.outcome in (PASS, FAIL):
            decision.notes.append(f"`{h.id}`: {b.outcome} on the base, UNSUPPORTED on the PR (coverage lost)")
        decision.rows.append(row(whole(h), h.outcome))
        return
    before = len(decision.rows)
    head_units = units_of(h)
    for unit in head_units:
        if unit.outcome == FAIL:
            _head_fails(decision, b, unit, sides)
        elif b is not None:
            _head_passes(decision, b, unit, sides)
    if b is not None and b.outcome == FAIL:
        judged = {unit.output for unit in head_units}
        for unit in units_of(b):
            if unit.outcome != FAIL or unit.output in judged:
                continue
            h_state, h_unit = state(h, unit.output)
            if unit.output == CHECK and h.outcome == PASS:
                _head_passes(decision, b, whole(h), sides)
            elif h_state == MASKED:
                decision.notes.append(
                    f"`{unit.name}` failed on the base and was not judged on the PR (its check failed before: "
                    f"{h_unit.reason})"
                )
            else:
                _head_passes(decision, b, Unit(h, unit.output, UNJUDGED), sides)
    if len(decision.rows) == before:
        decision.rows.append(row(whole(h), h.outcome))


def _head_fails(decision: Decision, b: Verdict | None, h_unit: Unit, sides: Sides) -> None:
    h = h_unit.verdict
    output = h_unit.output
    if b is None:
        decision.rows.append(row(h_unit, NEW_FAIL + _hang(h_unit), h_unit.reason))
        decision.new_failures.append(entry(h_unit))
        return
    b_state, b_unit = state(b, output)
    if b.outcome not in (PASS, FAIL):
        reason = f"{h_unit.reason} (the base: {b.outcome})"
        decision.rows.append(row(h_unit, NEW_FAIL + _hang(h_unit), reason))
        decision.new_failures.append(entry(h_unit, reason))
        return
    if _unmasked(b, b_state, b_unit, h_unit):
        detail = f"unmasked: the base failed as {b_unit.kind} before its outputs were checked, the PR as "
        detail += f"{h_unit.kind}: {h_unit.reason}"
        decision.rows.append(row(h_unit, STILL_FAILING, detail))
        decision.still_failing.append(entry(h_unit, detail))
        return
    if b_state == FAIL:
        if _same(b_unit, h_unit):
            _still_failing(decision, b_unit, h_unit)
            return
        replayed, found = sides.on_base(h, output)
        if replayed == FAIL and _same(_as_unit(b, output, found), h_unit):
            detail = f"the base fails the PR's counterexample the same way: {h_unit.reason}"
            decision.rows.append(row(h_unit, STILL_FAILING + _hang(h_unit), detail))
            decision.still_failing.append(entry(h_unit, detail))
            return
        reason = f"the base fails as {b_unit.kind}, the PR as {h_unit.kind}"
        differs = signature.differences(
            {**b_unit.signature, "kind": b_unit.kind}, {**h_unit.signature, "kind": h_unit.kind}
        )
        reason += f" ({differs}): {h_unit.reason}" if differs else f": {h_unit.reason}"
        decision.rows.append(row(h_unit, FAILS_DIFFERENTLY, reason))
        decision.new_failures.append(entry(h_unit, reason))
        return
    replayed, found = sides.on_base(h, output)
    if replayed == FAIL:
        detail = f"pre-existing: the base fails the PR's counterexample too ({found.get('headline', '')}): "
        detail += h_unit.reason
        decision.rows.append(row(h_unit, STILL_FAILING + _hang(h_unit), detail))
        decision.still_failing.append(entry(h_unit, detail))
        return
    note = sides.replay_note(h)
    if note and note not in decision.notes:
        decision.notes.append(note)
    if output == CHECK and b.outcome == FAIL:
        # The base returned (it failed on its outputs); the PR raises, hangs or crashes instead.
        reason = f"the base fails on its outputs, the PR as {h_unit.kind}: {h_unit.reason}"
        decision.rows.append(row(h_unit, FAILS_DIFFERENTLY, reason))
        decision.new_failures.append(entry(h_unit, reason))
        return
    decision.rows.append(row(h_unit, NEW_FAIL + _hang(h_unit), h_unit.reason))
    decision.new_failures.append(entry(h_unit, h_unit.reason))


def _as_unit(verdict: Verdict, output: str, found: dict) -> Unit:
    return Unit(
        verdict, output, FAIL, found.get("kind", ""), found.get("headline", ""), dict(found.get("signature", {}))
    )


def _still_failing(decision: Decision, b_unit: Unit, h_unit: Unit) -> None:
    """Both sides fail the output the same way: STILL FAILING, or by a budget figure worse / IMPROVED."""
    changes = _figure_changes(b_unit.figures, h_unit.figures)
    figures = _describe(changes)
    if _worse(changes):
        reason = f"worse than the base: {figures}: {h_unit.reason}"
        decision.rows.append(row(h_unit, NEW_FAIL + _hang(h_unit), reason))
        decision.new_failures.append(entry(h_unit, reason))
        return
    outcome = IMPROVED if _better(changes) else STILL_FAILING
    detail = f"{figures}: {h_unit.reason}" if figures else h_unit.reason
    narrowed = signature.differences(
        {**b_unit.signature, "kind": b_unit.kind}, {**h_unit.signature, "kind": h_unit.kind}
    )
    if narrowed:
        detail = f"narrowed ({narrowed}): {detail}"
    decision.rows.append(row(h_unit, outcome + _hang(h_unit), detail))
    decision.still_failing.append(entry(h_unit))
    if outcome == IMPROVED:
        decision.improved.append(Entry(h_unit.id, h_unit.tier, figures, output=h_unit.output))


def _head_passes(decision: Decision, b: Verdict, h_unit: Unit, sides: Sides) -> None:
    """The PR passes (or did not reach) an output: FIXED when the base failed it and the PR passes the base's Case."""
    b_state, b_unit = state(b, h_unit.output)
    if b_state != FAIL:
        return
    replayed, found = sides.on_head(b, h_unit.output)
    if replayed == FAIL:
        detail = f"the PR's run passed, but it fails the base's counterexample: {found.get('headline', '')}"
        decision.rows.append(row(h_unit, STILL_FAILING, detail))
        decision.still_failing.append(Entry(h_unit.id, b_unit.tier, detail, b.case, b.replay, output=h_unit.output))
        return
    if replayed == MASKED:
        # The PR fails the whole check on the base's counterexample before this output is judged: not shown to pass.
        decision.notes.append(
            f"`{b_unit.name}` failed on the base; on its counterexample the PR fails the whole check before judging "
            f"it ({found.get('headline', '')}): not FIXED"
        )
        return
    if h_unit.outcome == UNJUDGED and replayed != PASS:
        decision.notes.append(
            f"`{b_unit.name}` failed on the base; the PR's run did not judge it and its replay gave "
            f"{replayed or 'nothing'}"
        )
        return
    fixed = Unit(h_unit.verdict, h_unit.output, PASS, b_unit.kind)
    decision.rows.append(row(fixed, FIXED, f"the base failed: {b_unit.reason}"))
    decision.fixed.append(entry(b_unit))
