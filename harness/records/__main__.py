"""``python -m harness.records [--reports DIR] [--out DIR]``: import newer runs, then render every record.

``nox -s docs`` runs it. Runs under ``--reports`` (default ``reports/``, where
the gate and the history write) that are newer than their record become its
data (``store.import_reports``); then every page is rendered from the data
and the registry. A page whose text did not change is not rewritten, and a
generated page nothing produces any more is removed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.records import conformance, families, history, measurements, store
from harness.records.index import render_index
from harness.records.markdown import banner
from harness.targets import registry

GENERATED = ("families/*.md", "history/*.md", "conformance.html", "index.md", "gate-comment.md", "bench.md", "gpu.md")


def pages(out: Path) -> dict[Path, str]:
    """Every generated page under ``out`` and its text."""
    snapshots = store.load_all(store.GATES)
    names = registry.names()
    rendered = {out / "families" / f"{name}.md": families.render(name, snapshots.get(name)) for name in names}
    for family, snapshot in store.load_all(store.HISTORIES).items():
        rendered[out / "history" / f"{family}.md"] = history.render(family, snapshot, history.attributions(family))
    rendered[out / "conformance.html"] = conformance.render(snapshots, set(names))
    if store.EXAMPLE.is_file():
        rendered[out / "gate-comment.md"] = example_page(json.loads(store.EXAMPLE.read_text()))
    rendered.update(measurements.pages(out))
    rendered[out / "index.md"] = render_index(snapshots, names)
    return rendered


def example_page(example: dict) -> str:
    """What the workflow posts on a pull request the gate blocks: the newest such run's comment, verbatim."""
    about = example["about"]
    lines = banner("docs/records/data/example-summary.json")
    lines += [
        "# What the gate posts on a pull request it blocks",
        "",
        f"The comment of `python -m harness.gate {about['spec']} --baseline {about['baseline']}` "
        f"({about['date']}, harness {about['harness']}), as `ci/upstream-gate.yml` posts it to the run's summary:",
        "",
        "---",
        "",
    ]
    return "\n".join(lines) + example["summary"]


def write(rendered: dict[Path, str], out: Path) -> list[str]:
    """Write what changed, remove what is no longer generated; what was done, one line each."""
    done = []
    for path, text in rendered.items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            done.append(f"wrote {path}")
    for pattern in GENERATED:
        for path in out.glob(pattern):
            if path not in rendered:
                path.unlink()
                done.append(f"removed {path} (nothing generates it)")
    return done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.records", description=__doc__.splitlines()[0])
    parser.add_argument("--reports", default="reports", help="where gate and history runs left their outputs")
    parser.add_argument("--out", default=str(store.RECORDS), help="where the pages go")
    args = parser.parse_args(argv)
    reports = Path(args.reports)
    for line in store.import_reports(reports) if reports.is_dir() else [f"no {reports}: nothing imported"]:
        print(f"records: {line}")
    out = Path(args.out)
    changes = write(pages(out), out)
    for line in changes:
        print(f"records: {line}")
    print(f"records: {len(changes)} change(s) under {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
