"""A family's history record: the history command's table with every row attributed from its diff.

The gate's decision on a commit says what changed between two verdict sets;
whether the commit CHANGED THE CODE'S BEHAVIOUR is read from its diff by a
person, and written as data beside the table
(``docs/records/data/attribution/<name>.toml``, the record's name: ``commit``,
``attribution``, ``why``; a row with both NEW FAIL and FIXED gives its FIXED
side its own ``fixed_attribution`` and ``fixed_why``). An attribution is one of:

* ``defect``: the code under test changed the behaviour (the why names the lines);
* ``reachable``: a capability or check became runnable here; the behaviour predates it;
* ``unmasked``: another failure that hid it went away;
* ``harness``: the revision's layout or the adapter, not the library.

Only ``defect`` rows count as blocked or fixed in the record's summary; a
NEW FAIL or FIXED row nobody attributed yet says so and counts nowhere.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from harness.gate.history_table import keyed_by
from harness.records import store
from harness.records.markdown import banner, cell, code, table

ATTRIBUTIONS = ("defect", "reachable", "unmasked", "harness")
ATTRIBUTION = store.DATA / "attribution"


def attributions(family: str, folder: Path = ATTRIBUTION) -> dict[str, dict]:
    """The family's attributions by commit; a malformed entry is an error naming the file and the commit."""
    path = folder / f"{family}.toml"
    if not path.is_file():
        return {}
    found = {}
    for entry in tomllib.loads(path.read_text()).get("row", []):
        commit, kind = entry.get("commit"), entry.get("attribution")
        if not commit or kind not in ATTRIBUTIONS or not entry.get("why"):
            raise ValueError(f"{path}: row {commit!r} needs commit, attribution (one of {ATTRIBUTIONS}) and why")
        fixed = entry.get("fixed_attribution")
        if fixed is not None and (fixed not in ATTRIBUTIONS or not entry.get("fixed_why")):
            raise ValueError(f"{path}: row {commit!r}: fixed_attribution must be one of {ATTRIBUTIONS}, with fixed_why")
        found[commit] = entry
    return found


def _changed(row: dict) -> bool:
    return bool(row["new_fail"] or row["fixed"])


def summary(rows: list[dict], attributed: dict[str, dict]) -> dict[str, int]:
    """Counts a reader can quote: only ``defect`` rows are blocks and fixes."""
    counts = {"revisions": len(rows), "defect blocks": 0, "defect fixes": 0, "unattributed": 0, "ERROR": 0}
    counts.update({kind: 0 for kind in ATTRIBUTIONS if kind != "defect"})
    for row in rows:
        if row.get("errors"):
            counts["ERROR"] += 1
        if not _changed(row):
            continue
        entry = attributed.get(row["commit"])
        if entry is None:
            counts["unattributed"] += 1
            continue
        for side, kind in _sides(row, entry):
            if kind == "defect":
                counts["defect blocks" if side == "new_fail" else "defect fixes"] += 1
            else:
                counts[kind] += 1
    return counts


def _sides(row: dict, entry: dict) -> list[tuple[str, str]]:
    """(side, attribution) for each side of a row that changed: its NEW FAIL and its FIXED."""
    if row["new_fail"] and row["fixed"]:
        return [("new_fail", entry["attribution"]), ("fixed", entry.get("fixed_attribution", entry["attribution"]))]
    return [("new_fail" if row["new_fail"] else "fixed", entry["attribution"])]


def _until(about: dict) -> str:
    """The window's end when it is not the newest revision (a replay of part of a history says so)."""
    until = about.get("until", "HEAD")
    return "" if until == "HEAD" else f" --until {until}"


def _reach(about: dict) -> str:
    """A table whose replay has not reached its window's end says how far it got (tables written before replays
    recorded it were written at their window's end)."""
    if about.get("complete", True):
        return ""
    return (
        f" **Not yet whole**: replayed through {about.get('through') or 'no commit'}; the window's later commits are "
        f"to come (`--resume` this table from a worktree at harness {about['harness']})."
    )


def _spec(about: dict) -> str:
    """The history's own spec: ``FAMILY==pypi`` or the releases it named, else a checkout (``FAMILY=PATH``)."""
    family = about["family"]
    return f"{family}=={about['source']}" if store.replays_releases(about) else f"{family}=PATH"


def render(name: str, snapshot: dict, attributed: dict[str, dict]) -> str:
    """The record ``name`` (``store.history_name``: the family, or ``<family>-releases``) with its attributions."""
    about, rows = snapshot["about"], snapshot["rows"]
    kind = "its PyPI releases" if store.replays_releases(about) else "its repository's commits"
    lines = banner(f"docs/records/data/history/{name}.json and docs/records/data/attribution/{name}.toml")
    lines += [
        f"# History of {about['family']} through the gate: {kind}",
        "",
        f"Replayed on {about['date']} with harness {about['harness']}: {len(rows)} rows (the revisions that changed "
        f"the key, of {about['total']} touching its files) from {about['since']} to {about.get('until', 'HEAD')} "
        f"({cell(about.get('source', ''))}).{_reach(about)} Selection: "
        f"{cell(about['selection'])}; Hypothesis profile `{about.get('profile', 'not recorded')}`. Regenerate: "
        f"`nox -s history -- {_spec(about)} --since {about['since']}{_until(about)}`, then `nox -s docs`.",
        "",
        "Keyed by the files the loader executed: " + keyed_by(about["keyed_by"], about.get("alone", {})),
        "",
    ]
    lines += table(("count", "rows"), list(summary(rows, attributed).items()))
    lines += [
        "",
        "Only `defect` rows are blocks or fixes (`harness/records/history.py` says what each kind means).",
        "",
    ]
    body = []
    for row in rows:
        # An attribution reads a row's NEW FAIL or FIXED; on a row that changed nothing in this replay (one written
        # for an older replay, whose change came from the harness) it would explain what the table does not show.
        changed = _changed(row)
        entry = attributed.get(row["commit"], {}) if changed else {}
        kind = entry.get("attribution", "unattributed" if changed else "")
        why = entry.get("why", "")
        if entry.get("fixed_attribution") and row["new_fail"] and row["fixed"]:
            kind = f"{kind} / fixed: {entry['fixed_attribution']}"
            why = f"{why} FIXED: {entry['fixed_why']}"
        body.append(
            (
                code(row["commit"]),
                row["date"],
                row["title"],
                "<br>".join(code(x.split("::", 1)[-1]) for x in row["new_fail"]) or "-",
                "<br>".join(code(x.split("::", 1)[-1]) for x in row["fixed"]) or "-",
                "<br>".join(row.get("errors", [])) or "-",
                kind or "-",
                why,
            )
        )
    lines += table(("commit", "date", "title", "NEW FAIL", "FIXED", "ERROR", "attribution", "why"), body)
    return "\n".join(lines) + "\n"
