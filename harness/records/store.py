"""Where records live and how a run's output becomes a record's data (a snapshot).

A snapshot is what a page needs from one run and nothing that changes with
the machine that renders it: the run's date and harness revision, its spec,
profile and wall time, and its rows. A gate run becomes one
(``docs/records/data/gates/<name>.json``) from its ``gate.json``; a history
run (``docs/records/data/history/<family>.json``) from its ``history.json``.
An import replaces a snapshot only with a newer run (by date, then by the
harness revision's order being unknown: a run of the same date replaces).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict
from pathlib import Path

from harness import ROOT
from harness.gate import expectations, render, single, specs
from harness.gate.render import Row
from harness.gate.verdicts import Run
from harness.targets import registry
from harness.targets import spec as target_spec

RECORDS = ROOT / "docs" / "records"
DATA = RECORDS / "data"
GATES = DATA / "gates"
HISTORIES = DATA / "history"
GATE_FILE, HISTORY_FILE, SUMMARY_FILE = "gate.json", "history.json", "summary.md"
EXAMPLE = DATA / "example-summary.json"  # the newest blocking base-vs-PR run: what the workflow posts
# Measurement runs: ``nox -s bench`` -> reports/bench/, ``nox -s gpu`` -> reports/gpu/, each with its about.json
MEASUREMENTS = {
    "bench": ("speed.json", "memory.json", "hidden.json"),
    "gpu": ("calibration.json", "bench.json", "hidden.json", "steps.json"),
}
ROW_KEYS = ("id", "output", "tier", "outcome", "detail", "reproduce")
NOT_RECORDED = "not recorded"
RECLASSIFIED = (
    "a run from before gate runs recorded their rows: classified again from its verdicts with the expectations "
    "of the revision that imported it"
)


class NotARecord(ValueError):
    """A report directory that cannot become a record (it says which file and what to run)."""


def gate_snapshot(directory: Path) -> dict:
    """The snapshot of one single-target gate run: its ``gate.json`` rows and ``about``.

    A run written before gate runs recorded them (no ``rows``) is classified again from its
    ``verdicts.json`` with the family's expectations as they are now, and says so: its harness revision is
    "not recorded" and its date the day its ``gate.json`` was written.
    """
    directory = Path(directory)
    path = directory / GATE_FILE
    body = json.loads(path.read_text())
    if body.get("mode") != "single":
        raise NotARecord(f"{path}: a base-vs-PR run, not one target's conformance")
    about, rows, exit_code = body.get("about"), body.get("rows"), body["exit_code"]
    if about is None or rows is None:
        about, rows, exit_code = _reclassified(directory)
    kept = sorted(({key: row.get(key, "") for key in ROW_KEYS} for row in rows), key=_row_key)
    return {"about": about, "exit_code": exit_code, "counts": render.counts([Row(**row) for row in kept]), "rows": kept}


def _row_key(row: dict) -> tuple:
    return row["id"], row["output"]


def outcomes(snapshot: dict) -> str:
    """``93 KNOWN, 37 PASS, ...``: a run's counts in one line."""
    return ", ".join(f"{n} {outcome}" for outcome, n in snapshot["counts"].items())


def _family_of(target: str) -> tuple[str, str]:
    """(family, version) of a run's target, in the one grammar (``harness/targets/spec.py``), else a legacy
    adapter's class."""
    try:
        parsed = target_spec.parse(target, present=False)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.family:
        return parsed.family, parsed.where if parsed.kind == "release" else ""
    for name in registry.names():
        record = registry.family(name)
        if target in (getattr(record, "adapter", None), getattr(record, "hidden", None)):
            return name, ""
    return "", ""


def _reclassified(directory: Path) -> tuple[dict, list[dict], int]:
    run = Run.load(directory)
    family, version = _family_of(run.target)
    if not family and run.target != "impl":
        raise NotARecord(f"{directory}: target {run.target!r} is no family of the registry nor impl")
    written = {}
    for each in specs.expectation_files(family or None):
        written.update(expectations.load(each))
    decision = single.classify(run, written)
    written_on = datetime.datetime.fromtimestamp((directory / GATE_FILE).stat().st_mtime, datetime.UTC)
    about = {
        "spec": run.target,
        "family": family,
        "slug": directory.name,
        "version": version,
        "date": written_on.date().isoformat(),
        "harness": NOT_RECORDED,
        "profile": run.meta.get("profile", ""),
        "wall_s": None,
        "note": RECLASSIFIED,
    }
    return about, [asdict(row) for row in decision.rows], decision.exit_code


def example_snapshot(directory: Path) -> dict:
    """A blocking base-vs-PR run's comment (its ``summary.md``) and what it compared: the README's example."""
    body = json.loads((Path(directory) / GATE_FILE).read_text())
    if body.get("mode") == "single" or body.get("exit_code") != 1 or "about" not in body:
        raise NotARecord(f"{directory}: not a blocking base-vs-PR run that recorded what it compared")
    return {"about": body["about"], "summary": (Path(directory) / SUMMARY_FILE).read_text()}


def history_snapshot(directory: Path) -> dict:
    """The snapshot of one history run (its ``history.json`` with its ``about``)."""
    path = Path(directory) / HISTORY_FILE
    body = json.loads(path.read_text())
    if not isinstance(body, dict) or "about" not in body:
        raise NotARecord(
            f"{path}: a history written before runs recorded what they ran (harness revision, selection): "
            "rerun `nox -s history -- FAMILY=PATH`"
        )
    return body


def name_of(snapshot: dict) -> str:
    """The record's name: the family, else the target's slug (``impl``)."""
    about = snapshot["about"]
    return about.get("family") or about["slug"]


def replays_releases(about: dict) -> bool:
    """Whether a history replayed a family's published releases (``FAMILY==pypi`` or ``==V1,V2``) rather than the
    commits of a checkout, whose source is the repository's path."""
    return about.get("releases", not about.get("source", "").startswith("/"))


def history_name(snapshot: dict) -> str:
    """A history's record name: the family for its commits, ``<family>-releases`` for its PyPI releases. A family
    may have both (SkyRL: its repository's commits and its releases), and neither replaces the other."""
    about = snapshot["about"]
    return f"{about['family']}-releases" if replays_releases(about) else about["family"]


def newer(candidate: dict, stored: dict | None) -> bool:
    return stored is None or candidate["about"]["date"] >= stored["about"]["date"]


def load_all(folder: Path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


def _keep_newer(path: Path, snapshot: dict) -> bool:
    """Write ``snapshot`` to ``path`` unless what is there is newer or the same; whether it was written."""
    previous = json.loads(path.read_text()) if path.is_file() else None
    if not newer(snapshot, previous) or snapshot == previous:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    return True


def _run_facts(source: Path) -> dict | None:
    """What a measurement run was: its ``about.json``, or the facts the prepared GPU run (``bench.gpu_quick``)
    keeps in ``steps.json``; None for no run, or for that run's CPU dry run (its figures are not GPU speeds)."""
    if (source / "about.json").is_file():
        return json.loads((source / "about.json").read_text())
    if not (source / "steps.json").is_file():
        return None
    facts = json.loads((source / "steps.json").read_text()).get("about")
    return facts if facts and facts.get("mode") == "cuda" else None


def _run_file(source: Path, name: str) -> Path | None:
    """A run's file: at its top (``nox -s bench``, ``nox -s gpu``) or in one step's folder (``bench.gpu_quick``)."""
    found = [source / name] if (source / name).is_file() else sorted(source.glob(f"*/{name}"))
    return found[0] if found else None


def import_measurement(source: Path, folder: Path, kind: str | None = None) -> bool:
    """A bench or GPU run (its tables and what it was) replaces the record's data when it is newer; whether it did.

    ``kind`` (``MEASUREMENTS``' key) defaults to the folder's name. A run
    that does not say what it was (machine, load, revision) is not a record
    and is left alone.
    """
    facts = _run_facts(source)
    if facts is None:
        return False
    stored = folder / "about.json"
    if stored.is_file() and json.loads(stored.read_text())["date"] >= facts["date"]:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.json"):
        old.unlink()
    stored.write_text(json.dumps(facts, indent=1) + "\n")
    for name in MEASUREMENTS[kind or source.name]:
        found = _run_file(source, name)
        if found is not None:
            (folder / name).write_text(json.dumps(json.loads(found.read_text()), indent=1) + "\n")
    return True


def import_reports(reports: Path) -> list[str]:
    """Every run under ``reports`` newer than its record (a single-target gate run, a blocking base-vs-PR run's
    comment, a history, a bench or GPU run): what was imported, and what was not (why)."""
    imported = []
    for path in sorted(Path(reports).rglob(GATE_FILE)):
        try:
            snapshot = gate_snapshot(path.parent)
            target, label = GATES / f"{name_of(snapshot)}.json", f"gate {name_of(snapshot)}"
        except NotARecord as exc:
            try:
                snapshot, target, label = example_snapshot(path.parent), EXAMPLE, "example comment"
            except NotARecord:
                imported.append(f"gate skipped: {exc}")
                continue
        if _keep_newer(target, snapshot):
            imported.append(f"{label}: {path.parent}")
    for kind in MEASUREMENTS:
        # the prepared GPU run writes reports/gpu/quick/ (bench.gpu_quick); the newer of the two is kept
        for source in (Path(reports) / kind, Path(reports) / kind / "quick"):
            if import_measurement(source, DATA / kind, kind):
                imported.append(f"{kind}: {source}")
    for path in sorted(Path(reports).rglob(HISTORY_FILE)):
        try:
            snapshot = history_snapshot(path.parent)
        except NotARecord as exc:
            imported.append(f"history skipped: {exc}")
            continue
        if _keep_newer(HISTORIES / f"{history_name(snapshot)}.json", snapshot):
            imported.append(f"history {history_name(snapshot)}: {path.parent}")
    return imported
