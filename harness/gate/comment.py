"""The pull-request comment (``summary.md``, ``$GITHUB_STEP_SUMMARY``): what a maintainer reads first.

A maintainer reads the first screen. So the comment opens with one line of
verdict, then each BLOCKING failure in full (check, tier, the historic bug
or failure kind it belongs to, one line of reason, the shrunk Case, the
replay command), then what was FIXED and what could not be decided; every
non-blocking outcome (known failures, failures of tiers that are not gated,
UNSUPPORTED checks) follows folded in ``<details>``, one line per class
(the same test function, outcome and failure kind) with a count. A
comment never exceeds ``LIMIT`` characters, whatever the number of
failures: entries past the limit are left to ``report.md`` with a line
saying how many.
"""

from __future__ import annotations

from collections import defaultdict

from harness.gate.render import Row, counts_line, unsupported_lines
from harness.gate.tiers import is_named_regression

# GitHub refuses a comment over 65,536 characters; keep a margin for the workflow's own lines.
LIMIT = 60_000
CASE_LIMIT = 1_500  # a shrunk Case longer than this is folded

# The named regressions (regressions/, one per historic bug in docs/bugs.md).
BUGS = {
    "test_inverted_no_grad_gate": "docs/bugs.md #1: the inverted no_grad gate",
    "test_inplace_version_counter": "docs/bugs.md #2: in-place writes on saved logits",
    "test_one_hot_oom": "docs/bugs.md #3: the one_hot OOM in the chunked backward",
    "test_allgather_cp_regrad": "docs/bugs.md #4: the allgather-CP re-grad",
    "test_dsa_hang": "docs/bugs.md #5: the DSA training hang",
}


def bug_class(entry_id: str, kind: str) -> str:
    """The named regression's historic bug, else the failure kind (what a reader can act on)."""
    if is_named_regression(entry_id):
        module = entry_id.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        if module in BUGS:
            return f"named regression, {BUGS[module]}"
    return f"{kind} failure" if kind else "failure"


def _fence(language: str, text: str) -> list[str]:
    body = [f"```{language}", text, "```"]
    if len(text) <= CASE_LIMIT:
        return body
    return ["<details><summary>shrunk case (long)</summary>", "", *body, "", "</details>"]


def _blocking(entry) -> list[str]:
    lines = [f"### BLOCKING `{entry.name}`", "", f"- tier: **{entry.tier}**"]
    lines += [f"- class: {bug_class(entry.id, entry.kind)}"]
    lines += [f"- reason: {entry.reason.splitlines()[0] if entry.reason else '(none given)'}"]
    if entry.diagnosis:
        lines.append(f"- diagnosis: {entry.diagnosis}")
    lines += [f"- warned: {warning}"[:400] for warning in entry.warnings[:5]]
    lines.append("")
    if entry.case:
        lines += ["Shrunk case:", "", *_fence("json", entry.case), ""]
    if entry.replay:
        lines += ["Replay:", "", *_fence("bash", entry.replay), ""]
    return lines


def _function(check_id: str) -> str:
    return check_id.split("[", 1)[0]


def folded(rows: list[Row]) -> list[str]:
    """One line per (test function, output, outcome, kind), with a count and the first instance's detail."""
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for row in rows:
        groups[(_function(row.id), row.outcome, row.kind, row.tier, row.output)].append(row)
    lines = []
    for (function, outcome, kind, tier, output), members in sorted(
        groups.items(), key=lambda g: (g[0][3], g[0][0], g[0][4])
    ):
        how = f"{outcome}, {kind}" if kind else outcome
        function = f"{function} [{output}]" if output else function
        detail = members[0].detail.splitlines()[0] if members[0].detail else ""
        count = f"{len(members)} x " if len(members) > 1 else ""
        lines.append(f"- [{tier}] {count}`{function}` ({how}): {detail}"[:400])
    return lines


def _details(summary: str, lines: list[str]) -> list[str]:
    if not lines:
        return []
    return ["<details>", f"<summary>{summary}</summary>", "", *lines, "", "</details>", ""]


def render(decision) -> str:
    """The comment for ``decision`` (harness/gate/decision.py), at most ``LIMIT`` characters."""
    verdict = {0: "green", 1: "RED"}.get(decision.exit_code, "undecided (infrastructure errors: rerun)")
    blocking = decision.blocking
    head = [
        f"## logprob-harness: {decision.title}: {verdict}, {len(blocking)} blocking "
        f"(gated tiers: {', '.join(decision.tiers)})",
        "",
        counts_line(decision.rows),
        "",
    ]
    sections = [_blocking(entry) for entry in blocking]
    if decision.fixed:
        sections.append(["### FIXED", "", *[f"- [{e.tier}] `{e.name}`: {e.reason}"[:400] for e in decision.fixed], ""])
    changed = [e for e in decision.changed if e not in blocking]
    if changed:
        lines = [f"- [{e.tier}] `{e.name}`: {e.reason}"[:400] for e in changed]
        sections.append(["### FAILS DIFFERENTLY (known failures that fail another way now)", "", *lines, ""])
    if decision.undecided:
        undecided = [f"- [{e.tier}] `{e.name}`: {e.reason}"[:400] for e in decision.undecided]
        sections.append(["### ERROR (the machine's, not the target's verdict: rerun)", "", *undecided, ""])
    shown = blocking + decision.fixed + changed + decision.undecided
    shown_keys = {(e.id, e.output) for e in shown}
    others = [
        r for r in decision.rows if (r.id, r.output) not in shown_keys and r.outcome not in ("PASS", "UNSUPPORTED")
    ]
    rest = _details(f"Non-blocking: {len(others)} outcomes ({counts_line(others)})", folded(others))
    unsupported = [f"- needs {key}: {len(ids)} checks" for key, ids in unsupported_lines(decision.rows)]
    rest += _details(f"UNSUPPORTED: {sum(r.outcome == 'UNSUPPORTED' for r in decision.rows)} checks", unsupported)
    rest += _details("Notes", [f"- {note}"[:600] for note in decision.notes])
    return _bounded(head, sections, rest)


def _bounded(head: list[str], sections: list[list[str]], rest: list[str]) -> str:
    """Head, then whole sections while they fit, then the folded rest if it fits; never over ``LIMIT``."""
    text, left_out = "\n".join(head), 0
    tail = "\n".join(rest)
    for section in sections:
        block = "\n".join(section)
        if len(text) + len(block) + len(tail) + 200 > LIMIT:
            left_out += 1
            continue
        text += "\n" + block
    if left_out:
        text += f"\n{left_out} more section(s) left out to stay under GitHub's comment limit: see report.md.\n"
    if len(text) + len(tail) + 1 <= LIMIT:
        text += "\n" + tail
    else:
        text += "\nThe non-blocking outcomes are in report.md (left out to stay under GitHub's comment limit).\n"
    return text[:LIMIT]
