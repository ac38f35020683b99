"""One target against its expectations: PASS, FAIL (unexpected), KNOWN, FIXED, UNSUPPORTED, per output.

Each check is classified output by output (``harness/gate/units.py``):

* FAIL: a failing output no expectation lists; red when its tier is gated
  (``contract`` by default in this mode);
* KNOWN: listed and still failing the way the entry says (its ``kind`` and
  ``signature``, ``harness/checks/signature.py``): green, listed in the
  report with its reason;
* FAILS DIFFERENTLY: listed, but failing another way (another kind, another
  exception, another message class or magnitude, contradicting conditions:
  a known wrong value that now hangs, one exception turned into another):
  listed first among the non-blocking outcomes, red under ``--strict`` (and
  always red base vs PR, harness/gate/compare.py);
* FIXED: listed but now passing: listed, red only under ``--strict``;
* ERROR: the machine could not decide the check (``verdicts``): neither red
  nor green for the target; the run exits 3 (undecided) if it is gated;
* an expectation naming no check of the run is reported as a note (renamed
  or removed check), and one for an output the run did not judge (its check
  failed before reaching it) as a note too, never silently kept.

An entry without an output (a file written before sub-verdicts) covers every
failing output of its check, by kind alone, and reads FIXED when the check passes.
"""

from __future__ import annotations

from harness.checks import signature
from harness.gate.decision import Decision, entry, row
from harness.gate.expectations import Expectation
from harness.gate.tiers import CONTRACT
from harness.gate.units import Unit, units_of, whole
from harness.gate.verdicts import ERROR, FAIL, HANG, PASS, Run

KNOWN, FIXED, FAILS_DIFFERENTLY = "KNOWN", "FIXED", "FAILS DIFFERENTLY"


def _expectation(expected: dict, unit: Unit) -> Expectation | None:
    return expected.get((unit.id, unit.output)) or expected.get((unit.id, None))


def _differs(known: Expectation, unit: Unit) -> str:
    """Why ``unit`` is not the failure ``known`` describes (empty when it is)."""
    if known.output is None:
        return f"{known.kind} -> {unit.kind}" if known.kind and unit.kind != known.kind else ""
    found = {**unit.signature, "kind": unit.kind}
    return (
        ""
        if signature.matches(known.expected_signature, found)
        else signature.differences(known.expected_signature, found)
    )


def classify(run: Run, expected: dict[tuple, Expectation], *, tiers=(CONTRACT,), strict: bool = False) -> Decision:
    decision = Decision(mode="single", title=f"target `{run.target}`", tiers=tuple(tiers), strict=strict)
    checks = run.checks()
    used: set = set()
    for verdict in sorted(checks.values(), key=lambda v: v.id):
        before = len(decision.rows)
        if verdict.outcome == ERROR:
            unit = whole(verdict)
            decision.rows.append(row(unit, ERROR))
            decision.errors.append(entry(unit))
            continue
        for unit in units_of(verdict):
            known = _expectation(expected, unit)
            if unit.outcome == FAIL:
                used.add(known.key if known is not None else None)
                _failing(decision, unit, known)
            elif unit.outcome == PASS and (unit.id, unit.output) in expected:
                known = expected[(unit.id, unit.output)]
                used.add(known.key)
                _fixed(decision, unit, known)
        legacy = expected.get((verdict.id, None))
        if legacy is not None and verdict.outcome == PASS:
            used.add(legacy.key)
            _fixed(decision, whole(verdict), legacy)
        if len(decision.rows) == before:
            decision.rows.append(row(whole(verdict), verdict.outcome))
    for key in sorted(set(expected) - used, key=lambda k: (k[0], k[1] or "")):
        known = expected[key]
        verdict = checks.get(known.id)
        if verdict is None:
            decision.notes.append(f"expectation for `{known.id}` matches no check of this run (renamed or removed?)")
        elif verdict.outcome == PASS:
            _fixed(decision, whole(verdict), known)
        elif verdict.outcome == FAIL:
            where = f" [{known.output}]" if known.output else ""
            decision.notes.append(
                f"expectation for `{known.id}`{where} not judged: the check failed before reaching it "
                f"({verdict.reason})"
            )
    return decision


def _fixed(decision: Decision, unit: Unit, known: Expectation) -> None:
    decision.rows.append(row(unit, FIXED, f"expected to fail ({known.reason}) but passes"))
    decision.fixed.append(entry(unit, f"expected to fail: {known.reason}"))


def _failing(decision: Decision, unit: Unit, known: Expectation | None) -> None:
    hang = " (hang)" if unit.kind == HANG else ""
    if known is None:
        decision.rows.append(row(unit, FAIL + hang))
        decision.new_failures.append(entry(unit))
        return
    differs = _differs(known, unit)
    if differs:
        was = known.kind or "a failure"
        detail = f"known to fail as {was} ({known.reason}), now fails as {unit.kind} ({differs}): {unit.reason}"
        decision.rows.append(row(unit, FAILS_DIFFERENTLY, detail))
        decision.changed.append(entry(unit, detail))
        return
    decision.rows.append(row(unit, KNOWN + hang, f"known: {known.reason}"))
    decision.still_failing.append(entry(unit, known.reason))
