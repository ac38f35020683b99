"""A gate decision: classified rows, the exit code, gate.json and the pull-request summary.

Both modes (one target against its expectations, base vs PR) end in the same
three lists, so a CI job reads one format: ``new_failures`` (what makes the
run red when its tier is gated), ``fixed`` and ``still_failing``, each entry
``{id, tier, reason}`` plus the counterexample and its replay command where
there is one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.gate import render
from harness.gate.render import Row

GATE_FILE = "gate.json"
SUMMARY_FILE = "summary.md"


@dataclass
class Entry:
    id: str
    tier: str
    reason: str
    case: str = ""
    replay: str = ""


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
    notes: list = field(default_factory=list)
    strict: bool = False

    @property
    def blocking(self) -> list[Entry]:
        blocking = [e for e in self.new_failures if e.tier in self.tiers]
        if self.strict:
            blocking += [e for e in self.fixed if e.tier in self.tiers]
        return blocking

    @property
    def exit_code(self) -> int:
        return 1 if self.blocking else 0

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
            "notes": self.notes,
        }

    def summary(self) -> str:
        """Markdown for a pull-request comment or $GITHUB_STEP_SUMMARY: counts first, then each blocking failure."""
        verdict = "red" if self.exit_code else "green"
        lines = [
            f"## logprob-harness: {self.title}: {verdict}",
            "",
            f"{len(self.new_failures)} new failure(s) ({len(self.blocking)} blocking, gated tiers: "
            f"{', '.join(self.tiers)}), {len(self.fixed)} fixed, {len(self.still_failing)} still failing; "
            f"{render.counts_line(self.rows)}",
            "",
        ]
        for entry in self.new_failures:
            gated = "" if entry.tier in self.tiers else " (tier not gated)"
            lines += [f"### NEW FAIL [{entry.tier}]{gated} `{entry.id}`", "", entry.reason, ""]
            if entry.case:
                lines += ["Shrunk case:", "", f"```json\n{entry.case}\n```", ""]
            if entry.replay:
                lines += ["Replay:", "", f"```bash\n{entry.replay}\n```", ""]
        if self.fixed:
            lines += ["### Fixed", ""] + [f"- [{e.tier}] `{e.id}`" for e in self.fixed] + [""]
        if self.improved:
            lines += ["### Improved (budget figures)", ""] + [f"- `{e.id}`: {e.reason}" for e in self.improved] + [""]
        if self.notes:
            lines += ["### Notes", ""] + [f"- {note}" for note in self.notes] + [""]
        return "\n".join(lines)

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
        blocking = self.blocking
        print(f"gate: {'RED' if blocking else 'GREEN'} ({len(blocking)} blocking in tiers {', '.join(self.tiers)})")


def row(verdict, outcome: str, detail: str = "") -> Row:
    reproduce = verdict.replay if verdict.failed else ""
    return Row(verdict.id, verdict.tier, outcome, detail or verdict.reason, reproduce, verdict.missing_capabilities)


def entry(verdict, reason: str = "") -> Entry:
    return Entry(verdict.id, verdict.tier, reason or verdict.short_reason, verdict.case, verdict.replay)
