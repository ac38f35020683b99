"""The records' front page: each family, its newest gate run in one line, and where its pages are."""

from __future__ import annotations

from harness.records import store
from harness.records.markdown import banner, table


def render_index(snapshots: dict[str, dict], names: tuple[str, ...]) -> str:
    lines = banner("harness/targets/registry.py and docs/records/data/gates/")
    lines += [
        "# Records",
        "",
        "Generated pages: the conformance page (`conformance.html`, every family's newest gate run beside "
        "impl's), one page per family (its record and known failures), and the data they are made from "
        "(`data/`), the history tables (`history/`), the CPU bench (`bench.md`) and the GPU results (`gpu.md`). "
        "Regenerate with `nox -s docs` after a gate, history, bench or GPU run.",
        "",
    ]
    rows = []
    for name in ("impl", *names):
        snapshot = snapshots.get(name)
        page = f"[{name}](families/{name}.md)" if name != "impl" else "impl"
        if snapshot is None:
            rows.append((page, "-", "no gate run recorded", "-"))
            continue
        about = snapshot["about"]
        counts = store.outcomes(snapshot)
        rows.append((page, f"`{about['spec']}`", f"{about['date']}, harness {about['harness']}", counts))
    lines += table(("family", "newest gate run", "when", "outcomes"), rows)
    return "\n".join(lines) + "\n"
