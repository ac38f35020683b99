"""A family's history record: the history command's table with every row attributed from its diff.

The gate's decision on a commit says what changed between two verdict sets;
whether the commit CHANGED THE CODE'S BEHAVIOUR is read from its diff by a
person, and written as data beside the table
(``docs/records/data/attribution/<family>.toml``: ``commit``,
``attribution``, ``why``). An attribution is one of:

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
        elif entry["attribution"] == "defect":
            counts["defect blocks"] += 1 if row["new_fail"] else 0
            counts["defect fixes"] += 1 if row["fixed"] else 0
        else:
            counts[entry["attribution"]] += 1
    return counts


def render(family: str, snapshot: dict, attributed: dict[str, dict]) -> str:
    about, rows = snapshot["about"], snapshot["rows"]
    lines = banner(f"docs/records/data/history/{family}.json and docs/records/data/attribution/{family}.toml")
    lines += [
        f"# History of {family} through the gate",
        "",
        f"Replayed on {about['date']} with harness {about['harness']}: {len(rows)} of {about['total']} revisions "
        f"from {about['since']} to {about.get('until', 'HEAD')} ({cell(about.get('source', ''))}). Selection: "
        f"{cell(about['selection'])}. Regenerate: `nox -s history -- {family}=PATH --since {about['since']}`, then "
        "`nox -s docs`.",
        "",
        "Keyed by the files the loader executed: " + ", ".join(code(p) for p in about["keyed_by"]) + ".",
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
        entry = attributed.get(row["commit"], {})
        kind = entry.get("attribution", "unattributed" if _changed(row) else "")
        body.append(
            (
                code(row["commit"]),
                row["date"],
                row["title"],
                "<br>".join(code(x.split("::", 1)[-1]) for x in row["new_fail"]) or "-",
                "<br>".join(code(x.split("::", 1)[-1]) for x in row["fixed"]) or "-",
                "<br>".join(row.get("errors", [])) or "-",
                kind or "-",
                entry.get("why", ""),
            )
        )
    lines += table(("commit", "date", "title", "NEW FAIL", "FIXED", "ERROR", "attribution", "why"), body)
    return "\n".join(lines) + "\n"
