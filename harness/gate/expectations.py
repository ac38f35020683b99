"""Known upstream failures: one entry per check, each with a true one-line reason.

The file is TOML, one file per target family (``expectations/slime.toml``,
``expectations/skyrl.toml``; any file with ``--expectations PATH``)::

    [[known]]
    id = "regressions/test_inplace_version_counter.py::test_second_backward_through_retained_graph"
    outcome = "FAIL"
    reason = "the entropy backward multiplies a tensor it saved for backward in place"
    link = "https://github.com/NovaSky-AI/SkyRL/issues/1648"

The reason says what is wrong UPSTREAM (never "flaky", never "the harness
is strict"); a check is expected to fail, never loosened to pass. Only
``FAIL`` is an expected outcome (a hang is a failure: its ``kind`` is in the
verdict). ``--update-expectations`` rewrites the file from a run, keeping
the reasons already written and marking new entries for a human to explain;
entries for checks the run did not include (a run of some test files only)
are kept as they are, and so is the file's header comment.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.gate.specs import ADAPTERS
from harness.gate.verdicts import FAIL, Run

FAMILIES = tuple(ADAPTERS)

EXPECTATIONS_DIR = Path(__file__).resolve().parents[2] / "expectations"
TO_EXPLAIN = "TO EXPLAIN: "


@dataclass(frozen=True)
class Expectation:
    id: str
    reason: str
    link: str = ""
    outcome: str = FAIL
    tier: str = ""


def load(path: Path | str) -> dict[str, Expectation]:
    """Parse an expectations file; a malformed entry is a clear error naming the file and the entry."""
    path = Path(path)
    try:
        body = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"--expectations {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--expectations {path}: not valid TOML: {exc}") from None
    entries: dict[str, Expectation] = {}
    for number, entry in enumerate(body.get("known", []), start=1):
        missing = [key for key in ("id", "reason") if not entry.get(key)]
        if missing:
            raise ValueError(f"{path}: [[known]] entry {number} lacks {missing}")
        unknown = set(entry) - {"id", "reason", "link", "outcome", "tier"}
        if unknown:
            raise ValueError(f"{path}: [[known]] entry {number} ({entry['id']}) has unknown keys {sorted(unknown)}")
        if entry.get("outcome", FAIL) != FAIL:
            raise ValueError(f"{path}: entry {entry['id']}: outcome must be {FAIL!r}")
        if entry["id"] in entries:
            raise ValueError(f"{path}: {entry['id']} is listed twice")
        link, tier = entry.get("link", ""), entry.get("tier", "")
        entries[entry["id"]] = Expectation(entry["id"], entry["reason"], link, tier=tier)
    return entries


def default_path(family: str | None) -> Path | None:
    """The shipped file for a target family, if there is one."""
    if not family:
        return None
    path = EXPECTATIONS_DIR / f"{family}.toml"
    return path if path.is_file() else None


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def header_of(path: Path) -> str:
    """The leading comment block of an expectations file (without the ``# ``), to keep it on a rewrite."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    return "\n".join(lines)


def _entry(id: str, tier: str, reason: str, link: str) -> list[str]:
    lines = ["", "[[known]]", f"id = {_quote(id)}"]
    if tier:
        lines.append(f"tier = {_quote(tier)}")
    lines.append(f"reason = {_quote(reason)}")
    if link:
        lines.append(f"link = {_quote(link)}")
    return lines


def render(run: Run, previous: dict[str, Expectation], header: str) -> str:
    """The expectations file for ``run``: every failing check, old reasons kept, new ones marked TO EXPLAIN;
    the previous entries of checks this run did not include, unchanged."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    checks = run.checks()
    for verdict in sorted(checks.values(), key=lambda v: (v.tier, v.id)):
        if verdict.outcome != FAIL:
            continue
        known = previous.get(verdict.id)
        reason = known.reason if known else TO_EXPLAIN + verdict.reason
        lines += _entry(verdict.id, verdict.tier, reason, known.link if known else "")
    for known in sorted(previous.values(), key=lambda e: (e.tier, e.id)):
        if known.id not in checks:
            lines += _entry(known.id, known.tier, known.reason, known.link)
    return "\n".join(lines) + "\n"
