"""Verdict tables as markdown and terminal lines, grouped by tier, named regressions first.

One renderer for every view: the raw verdicts of a run (the pytest plugin),
a target against its expectations (``single``) and a base-vs-PR comparison
(``compare``). Each view hands over ``Row``s, one per output a check judged
(``harness/gate/units.py``; a check whose outputs all pass is one PASS row);
UNSUPPORTED rows collapse into one line per missing capability, so the rows
that matter are not buried.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from harness.gate.tiers import CONTRACT, SELF_TEST, TIERS, is_named_regression
from harness.gate.verdicts import UNSUPPORTED

NAMED_REGRESSIONS = "named regressions"
SECTION_ORDER = (NAMED_REGRESSIONS, *TIERS, SELF_TEST)
# Within a section, what needs a reader's eyes comes first.
OUTCOME_ORDER = (
    "NEW FAIL",
    "FAIL",
    "FAILS DIFFERENTLY",
    "ERROR",
    "FIXED",
    "KNOWN",
    "STILL FAILING",
    "IMPROVED",
    "SKIPPED",
    "PASS",
)


@dataclass
class Row:
    id: str
    tier: str
    outcome: str
    detail: str = ""
    reproduce: str = ""
    missing: tuple = ()
    kind: str = ""  # of a failure: how it failed (harness.checks.failure)
    output: str = ""  # the output this row classifies ("" : the check as a whole)

    @property
    def name(self) -> str:
        """``check id`` or ``check id [output]``."""
        return f"{self.id} [{self.output}]" if self.output else self.id

    @property
    def section(self) -> str:
        if self.tier == CONTRACT and is_named_regression(self.id):
            return NAMED_REGRESSIONS
        return self.tier


def _order(row: Row) -> tuple:
    rank = OUTCOME_ORDER.index(row.outcome) if row.outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)
    return rank, row.id, row.output


def counts(rows: list[Row]) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for row in rows:
        totals[row.outcome] += 1
    return dict(sorted(totals.items()))


def counts_line(rows: list[Row]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in counts(rows).items()) or "no checks"


def _sections(rows: list[Row]) -> list[tuple[str, list[Row]]]:
    grouped: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if row.outcome != UNSUPPORTED:
            grouped[row.section].append(row)
    return [(name, sorted(grouped[name], key=_order)) for name in SECTION_ORDER if grouped.get(name)]


def unsupported_lines(rows: list[Row]) -> list[tuple[str, list[str]]]:
    """One (capabilities, check ids) pair per set of missing capabilities."""
    grouped: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row.outcome == UNSUPPORTED:
            grouped[", ".join(row.missing) or "(capability not named)"].append(row.id)
    return sorted((key, sorted(ids)) for key, ids in grouped.items())


def _cell(text: str) -> str:
    escaped = text.replace("|", "\\|")
    return f"`{escaped}`" if text else ""


def markdown(rows: list[Row], title: str, preamble: str = "") -> str:
    parts = [f"# {title}", "", counts_line(rows), ""]
    if preamble:
        parts += [preamble, ""]
    for name, section in _sections(rows):
        parts += [f"## {name}", "", "| check | tier | outcome | detail | reproduce |", "|---|---|---|---|---|"]
        parts += [
            f"| `{r.name}` | {r.tier} | {r.outcome} | {_cell(r.detail)} | {_cell(r.reproduce)} |" for r in section
        ]
        parts.append("")
    unsupported = unsupported_lines(rows)
    if unsupported:
        parts += ["## UNSUPPORTED (one line per missing capability)", ""]
        parts += [f"- needs {key}: {len(ids)} checks ({', '.join(f'`{i}`' for i in ids)})" for key, ids in unsupported]
        parts.append("")
    return "\n".join(parts)


def terminal_lines(rows: list[Row]) -> list[str]:
    lines = []
    for name, section in _sections(rows):
        lines.append(f"-- {name} --")
        for row in section:
            lines.append(f"{row.outcome:13} [{row.tier}] {row.name}")
            if row.detail:
                lines.append(f"{'':13} {row.detail}")
            if row.reproduce:
                lines.append(f"{'':13} reproduce: {row.reproduce}")
    for key, ids in unsupported_lines(rows):
        lines.append(f"UNSUPPORTED   needs {key}: {len(ids)} checks")
    lines.append(counts_line(rows))
    return lines
