"""A gate decision: classified rows, the exit code, gate.json and the pull-request summary.

Both modes (one target against its expectations, base vs PR) end in the same
lists, so a CI job reads one format: ``new_failures`` (what makes the run red
when its tier is gated), ``fixed``, ``still_failing`` and ``errors`` (checks
the machine could not decide even after a retry), each entry ``{id, output,
tier, reason}`` (one per output the gate classified, ``harness/gate/units.py``;
``output`` empty for the check as a whole) plus the counterexample and its
replay command where there is one.

Exit codes: 0 green; 1 a new failure in a gated tier (the PR's fault);
3 no blocking failure, but a gated check ended in ERROR (undecided: the
machine's fault, rerun the job); 2 is the runner's own usage/run error.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.gate import comment, render
from harness.gate.render import Row
from harness.gate.verdicts import ERROR, FAIL

GATE_FILE = "gate.json"
EXIT_UNDECIDED = 3  # no blocking failure, but a gated check could not be decided (infrastructure ERROR)
SUMMARY_FILE = "summary.md"


@dataclass
class Entry:
    id: str
    tier: str
    reason: str
    case: str = ""
    replay: str = ""
    kind: str = ""  # how it failed (harness/checks/failure.py)
    diagnosis: str = ""  # the conditions the failure needs (harness/checks/diagnosis.py), one line
    warnings: list = field(default_factory=list)  # what the ranks warned during the failing call
    output: str = ""  # the output classified ("" : the check as a whole)
    signature: dict = field(default_factory=dict)  # of a failure (harness/checks/signature.py)

    @property
    def name(self) -> str:
        """``check id`` or ``check id [output]``."""
        return f"{self.id} [{self.output}]" if self.output else self.id


@dataclass
class Decision:
    """What a gate run found; ``exit_code`` is non-zero iff a new failure sits in a gated tier."""

    mode: str
    title: str
    tiers: tuple
    rows: list = field(default_factory=list)
    new_failures: list = field(default_factory=list)
    fixed: list = field(default_factory=list)
    still_failing: list = field(default_factory=list)
    improved: list = field(default_factory=list)
    changed: list = field(default_factory=list)  # single mode: known failures that fail another way
    errors: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    strict: bool = False
    about: dict = field(default_factory=dict)  # single mode: the run (spec, date, harness revision), for records

    @property
    def blocking(self) -> list[Entry]:
        blocking = [e for e in self.new_failures if e.tier in self.tiers]
        if self.strict:
            blocking += [e for e in self.fixed + self.changed if e.tier in self.tiers]
        return blocking

    @property
    def undecided(self) -> list[Entry]:
        """Gated checks that ended in ERROR (infrastructure): no verdict on the target."""
        return [e for e in self.errors if e.tier in self.tiers]

    @property
    def exit_code(self) -> int:
        if self.blocking:
            return 1
        return EXIT_UNDECIDED if self.undecided else 0

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "title": self.title,
            "gated_tiers": list(self.tiers),
            "strict": self.strict,
            "exit_code": self.exit_code,
            "counts": render.counts(self.rows),
            "new_failures": [asdict(e) for e in self.new_failures],
            "fixed": [asdict(e) for e in self.fixed],
            "still_failing": [asdict(e) for e in self.still_failing],
            "improved": [asdict(e) for e in self.improved],
            "changed": [asdict(e) for e in self.changed],
            "errors": [asdict(e) for e in self.errors],
            "notes": self.notes,
            "about": self.about,
            "rows": [asdict(r) for r in self.rows],
        }

    def summary(self) -> str:
        """Markdown for a pull-request comment or $GITHUB_STEP_SUMMARY (harness/gate/comment.py)."""
        return comment.render(self)

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / GATE_FILE).write_text(json.dumps(self.to_json(), indent=1) + "\n")
        (directory / SUMMARY_FILE).write_text(self.summary())
        preamble = f"Gated tiers: {', '.join(self.tiers)}; exit code {self.exit_code}."
        (directory / "report.md").write_text(render.markdown(self.rows, self.title, preamble))

    def print(self) -> None:
        print(f"\n==== gate: {self.title} ====")
        for line in render.terminal_lines(self.rows):
            print(line)
        for note in self.notes:
            print(f"note: {note}")
        blocking, undecided = self.blocking, self.undecided
        state = "RED" if blocking else ("UNDECIDED" if undecided else "GREEN")
        print(
            f"gate: {state} ({len(blocking)} blocking, {len(undecided)} infrastructure error(s) "
            f"in tiers {', '.join(self.tiers)})"
        )


def row(unit, outcome: str, detail: str = "") -> Row:
    """A table row for one unit (``harness/gate/units.py``): one output of a check, or the check as a whole."""
    verdict = unit.verdict
    reproduce = verdict.replay if verdict.outcome in (FAIL, ERROR) else ""
    default = verdict.detail if not unit.output else (unit.reason or verdict.detail)
    return Row(
        verdict.id,
        unit.tier,
        outcome,
        detail or default,
        reproduce,
        tuple(verdict.missing),
        unit.kind,
        unit.output,
    )


def entry(unit, reason: str = "") -> Entry:
    verdict = unit.verdict
    warnings = [f"{w.get('category', '')}: {w.get('message', '')}" for w in verdict.warnings]
    return Entry(
        verdict.id,
        unit.tier,
        reason or unit.reason or verdict.reason,
        verdict.case,
        verdict.replay,
        unit.kind,
        verdict.diagnosis_summary,
        warnings,
        unit.output,
        dict(unit.signature),
    )
