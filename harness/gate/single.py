"""One target against its expectations: PASS, FAIL (unexpected), KNOWN, FIXED, UNSUPPORTED.

* FAIL: a failure no expectation lists; red when its tier is gated
  (``contract`` by default in this mode);
* KNOWN: listed and still failing, the way the entry says (its ``kind``):
  green, listed in the report with its reason;
* FAILS DIFFERENTLY: listed, but failing another way than its ``kind`` (a
  known wrong value that now hangs): listed first among the non-blocking
  outcomes, red under ``--strict`` (and always red base vs PR, harness/gate/compare.py);
* FIXED: listed but now passing: listed, red only under ``--strict``;
* ERROR: the machine could not decide the check (``verdicts``): neither red
  nor green for the target; the run exits 3 (undecided) if it is gated;
* an expectation naming no check of the run is reported as a note (renamed
  or removed check), never silently kept.
"""

from __future__ import annotations

from harness.gate.decision import Decision, entry, row
from harness.gate.expectations import Expectation
from harness.gate.tiers import CONTRACT
from harness.gate.verdicts import ERROR, FAIL, HANG, PASS, Run

KNOWN, FIXED, FAILS_DIFFERENTLY = "KNOWN", "FIXED", "FAILS DIFFERENTLY"


def classify(run: Run, expected: dict[str, Expectation], *, tiers=(CONTRACT,), strict: bool = False) -> Decision:
    decision = Decision(mode="single", title=f"target `{run.target}`", tiers=tuple(tiers), strict=strict)
    checks = run.checks()
    for verdict in sorted(checks.values(), key=lambda v: v.id):
        known = expected.get(verdict.id)
        hang = " (hang)" if verdict.kind == HANG else ""
        if verdict.outcome == ERROR:
            decision.rows.append(row(verdict, ERROR))
            decision.errors.append(entry(verdict))
        elif verdict.outcome == FAIL and known and known.kind and verdict.kind != known.kind:
            detail = f"known to fail as {known.kind} ({known.reason}), now fails as {verdict.kind}: {verdict.reason}"
            decision.rows.append(row(verdict, FAILS_DIFFERENTLY, detail))
            decision.changed.append(entry(verdict, detail))
        elif verdict.outcome == FAIL and known:
            decision.rows.append(row(verdict, KNOWN + hang, f"known: {known.reason}"))
            decision.still_failing.append(entry(verdict, known.reason))
        elif verdict.outcome == FAIL:
            decision.rows.append(row(verdict, FAIL + hang))
            decision.new_failures.append(entry(verdict))
        elif verdict.outcome == PASS and known:
            decision.rows.append(row(verdict, FIXED, f"expected to fail ({known.reason}) but passes"))
            decision.fixed.append(entry(verdict, f"expected to fail: {known.reason}"))
        else:
            decision.rows.append(row(verdict, verdict.outcome))
    for name in sorted(set(expected) - set(checks)):
        decision.notes.append(f"expectation for `{name}` matches no check of this run (renamed or removed?)")
    return decision
