"""A history replay's table: what it is about (``History``), its rows, and how it is written and continued.

``history.json`` (the header and the rows) is what ``nox -s docs`` turns into
the family's record (``harness/records/history.py``); ``history.md`` is the
same table for a reader of the cache. ``resumed`` reads an earlier table back,
so a replay pinned at its harness revision continues it instead of running its
commits again.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.gate import specs
from harness.gate.revisions import HARNESS_REVISION, Commit


@dataclass
class History:
    """What a table is about: the family, the window, the key files, the selection."""

    family: str
    since: str
    total: int
    keyed_by: list[str]
    selection: str
    source: str = ""  # the repository's path, or "pypi" / the releases given
    until: str = "HEAD"
    alone: dict[str, list[str]] = field(default_factory=dict)  # key files keyed by these definitions only
    harness: str = HARNESS_REVISION
    profile: str = field(default_factory=specs.hypothesis_profile)  # examples per check: said in the table's header
    date: str = field(default_factory=lambda: datetime.datetime.now(datetime.UTC).date().isoformat())  # the run's day
    # How far the table reaches: the last commit it decided ("sha date"), and whether that was the window's last (a
    # replay stopped before its end leaves a table of its first commits, which a --resume continues).
    through: str = ""
    complete: bool = False
    releases: bool = False  # a PyPI family's published releases, not a checkout's commits (its record's own name)


def resumed(path: Path, family: str, described: str) -> dict[str, dict]:
    """The rows of an earlier table, by commit, to keep instead of running their commits again.

    A row is the comparison of two trees fixed by their commits, so it holds for as long as the harness revision,
    the Hypothesis profile and the selection that produced it do (a key widened since adds rows, it changes none).
    The run caches live in a temporary folder between sessions of a long replay; the table is what is committed
    (``docs/records/data/history/<family>.json``), so a replay pinned at the table's harness revision continues
    from it. A table from another harness, profile or selection is refused: its rows would mix two suites.
    """
    if not path.is_file():
        raise ValueError(f"{path} is not a file: give a history.json an earlier replay wrote")
    earlier = json.loads(path.read_text())
    about = earlier.get("about", {})
    now = asdict(History(family, "", 0, [], described))  # this replay's harness and profile, as its table records them
    for fact in ("family", "harness", "profile", "selection"):
        if about.get(fact) != now[fact]:
            raise ValueError(
                f"{path} was replayed with {fact} {about.get(fact)!r}, this replay has {now[fact]!r}; run from a "
                f"worktree pinned at its harness (git worktree add --detach DIR {about.get('harness')}) with its "
                "profile (HYPOTHESIS_PROFILE), or replay without --resume"
            )
    return {row["commit"]: row for row in earlier.get("rows", [])}


def table_row(commit: Commit, new_fail, fixed, still_failing: int, errors, *, would_block: bool) -> dict:
    return {
        "commit": commit.label,
        "date": commit.date,
        "title": commit.subject,
        "new_fail": new_fail,
        "fixed": fixed,
        "still_failing": still_failing,
        "errors": errors,
        "would_block": would_block,
    }


def write(cache: Path, header: History, table: list[dict]) -> None:
    """The table so far (written after every commit, so a long replay can be read while it runs)."""
    cache.mkdir(parents=True, exist_ok=True)
    body = {"about": asdict(header), "rows": table}
    (cache / "history.json").write_text(json.dumps(body, indent=1) + "\n")
    (cache / "history.md").write_text(render_table(header, table))


def keyed_by(paths, alone: dict) -> str:
    """The key's files, each loaded only in part followed by the definitions it is keyed by."""
    named = [f"`{p}`" + (f" (only {', '.join(f'`{d}`' for d in alone[p])})" if p in alone else "") for p in paths]
    return ", ".join(named) + "."


def _short(ids: list[str]) -> str:
    return "<br>".join(f"`{i.split('::', 1)[-1]}`".replace("|", "\\|") for i in ids) or "-"


def render_table(header: History, table: list[dict]) -> str:
    blocked = sum(1 for row in table if row["would_block"])
    reach = "" if header.complete else f" Not yet whole: replayed through {header.through or 'none'}."
    lines = [
        f"# Gate history: {header.family} since {header.since}",
        "",
        f"{len(table)} rows (the commits that changed the key, of {header.total} touching its files); the gate "
        f"would have blocked {blocked}.{reach}",
        "",
        f"Keyed by the {len(header.keyed_by)} files the loader executed: " + keyed_by(header.keyed_by, header.alone),
        "",
        f"Selection: {header.selection}.",
        "",
        "| commit | date | PR title | NEW FAIL | FIXED | still failing | ERROR (undecided) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        title = row["title"].replace("|", "\\|")
        lines.append(
            f"| `{row['commit']}` | {row['date']} | {title} | {_short(row['new_fail'])} | {_short(row['fixed'])} "
            f"| {row['still_failing']} | {_short(row.get('errors', []))} |"
        )
    return "\n".join(lines) + "\n"
