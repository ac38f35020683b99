"""What the gate classifies: one unit per (check, output), from a verdict's sub-verdicts.

A check that judged its outputs one by one (``harness/checks/subtests.py``)
has one unit per output (``log_probs``, ``grad(logits)``, ``inputs``, ...),
so expectations, the verdict table, base vs PR and the history can say that
a PR fixed one output behind a persistent failure of another, or broke a
second output of a check that already failed. A check that judged no output
on its own (a bad-input row, a memory bound, a check that failed before any
output could be judged, a verdict from before sub-verdicts) is one unit,
its output ``""``: the check as a whole.

An output's state on one side of a comparison is one of:

* ``PASS``, ``FAIL``: it was judged (``FAIL`` carries its kind and signature);
* ``MASKED``: the check failed as a whole before it could be judged (the
  target raised, hung, crashed, or returned the wrong layout);
* ``UNJUDGED``: no example of the run judged it (the check passed, or failed
  on other outputs, without ever reaching it); a replay of the other side's
  counterexample judges it there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.checks import failure
from harness.checks.subtests import CHECK
from harness.gate.tiers import HARDENING
from harness.gate.verdicts import FAIL, PASS, Verdict

MASKED, UNJUDGED = "MASKED", "UNJUDGED"


@dataclass
class Unit:
    """One output of one check's verdict."""

    verdict: Verdict
    output: str = CHECK
    outcome: str = PASS
    kind: str = ""
    reason: str = ""
    signature: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.verdict.id

    @property
    def key(self) -> tuple[str, str]:
        return self.verdict.id, self.output

    @property
    def name(self) -> str:
        """``check id`` for the check as a whole, ``check id [output]`` otherwise."""
        return self.verdict.id if self.output == CHECK else f"{self.verdict.id} [{self.output}]"

    @property
    def tier(self) -> str:
        """The check's tier; a failure that rounding in the working dtype explains is hardening."""
        return HARDENING if self.kind == failure.PRECISION else self.verdict.tier


def units_of(verdict: Verdict) -> list[Unit]:
    """The verdict's units: one per judged output, or the check as a whole."""
    outputs = verdict.subtests if verdict.outcome in (PASS, FAIL) else {}
    if not outputs or (verdict.outcome == FAIL and not _fails(outputs)):
        return [whole(verdict)]
    units = []
    for output, entry in outputs.items():
        if entry.get("outcome") == FAIL:
            figures = {**verdict.figures, **entry.get("figures", {})} if output == CHECK else entry.get("figures", {})
            units.append(
                Unit(
                    verdict,
                    output,
                    FAIL,
                    entry.get("kind", ""),
                    entry.get("headline", ""),
                    dict(entry.get("signature", {})),
                    figures,
                )
            )
        else:
            units.append(Unit(verdict, output, PASS, figures=verdict.figures if output == CHECK else {}))
    return units


def whole(verdict: Verdict) -> Unit:
    """The check as a whole, as one unit (its own outcome and kind)."""
    entry = verdict.subtests.get(CHECK, {})
    return Unit(
        verdict,
        CHECK,
        verdict.outcome,
        verdict.kind,
        verdict.reason,
        dict(entry.get("signature", {})) or {"kind": verdict.kind},
        verdict.figures,
    )


def _fails(outputs: dict) -> bool:
    return any(entry.get("outcome") == FAIL for entry in outputs.values())


def state(verdict: Verdict | None, output: str) -> tuple[str, Unit | None]:
    """(PASS / FAIL / MASKED / UNJUDGED, the judged unit) of ``output`` in ``verdict`` (see the module docstring)."""
    if verdict is None:
        return UNJUDGED, None
    units = {unit.output: unit for unit in units_of(verdict)}
    if output in units:
        return units[output].outcome if units[output].outcome in (PASS, FAIL) else UNJUDGED, units[output]
    if output != CHECK and CHECK in units and units[CHECK].outcome == FAIL:
        return MASKED, units[CHECK]
    return UNJUDGED, None
