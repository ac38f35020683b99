"""One page per family, from its record in the registry and its expectations files.

What a maintainer asks of a family: where the harness finds it, which of its
files run, which of its functions serve which protocol method and what each
brings, what it does not declare and why, what a history leaves out, and
which failures are known with their reasons. All of it is data in the record
(``harness/targets/<family>/family.py``) or in ``expectations/``; this page
only lays it out, so the record's module docstring need not restate it.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path

from harness import ROOT
from harness.gate import expectations
from harness.records import store
from harness.records.markdown import banner, cell, code, table
from harness.targets import registry
from harness.targets.upstream.family import Family


def _first_paragraph(fn) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0]


def inputs(name: str) -> list[Path]:
    """The files the page is made from: the registry, the record's module, its expectations files."""
    record = registry.family(name)
    files = [
        ROOT / "harness/targets/registry.py",
        ROOT / (registry.FAMILIES[name].partition(":")[0].replace(".", "/") + ".py"),
    ]
    files += [ROOT / "expectations" / f for f in record.expectations if (ROOT / "expectations" / f).is_file()]
    return files


def fingerprint(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def render(name: str, snapshot: dict | None = None) -> str:
    """The page of ``name``; ``snapshot``: its newest gate run's record (``store.gate_snapshot``), if any."""
    record = registry.family(name)
    sources = inputs(name) + ([store.GATES / f"{name}.json"] if snapshot is not None else [])
    listed = ", ".join(path.relative_to(ROOT).as_posix() for path in sources)
    lines = banner(f"{listed} (inputs sha256 {fingerprint(sources)})")
    lines += [f"# {name}", ""]
    locate = record.locate
    lines += table(
        ("found as", "value"),
        [
            ("import name", code(locate.package)),
            ("marker file (every revision in the current layout has it)", code(locate.marker)),
            *((f"older layout under {code(sub + '/')}", code(marker)) for sub, marker in locate.older),
            ("checkout variable", code(locate.variable)),
            ("PyPI", code(locate.pypi) if locate.pypi else "checkouts only"),
            ("gate spec", code(f"{name}=PATH") + (f", {code(f'{name}==X')}" if locate.pypi else "")),
        ],
    )
    lines.append("")
    lines += _kernel(record)
    lines += _newest_run(name, snapshot)
    lines += _expectations(record)
    return "\n".join(lines).rstrip() + "\n"


def _kernel(record: Family) -> list[str]:
    lines = ["## Files it executes", ""]
    if record.modules:
        lines += ["The current dotted name first, then the older forms a history reaches.", ""]
        lines += table(
            ("key", "module (older forms after)"), [(k, ", ".join(m.names)) for k, m in record.modules.items()]
        )
    if record.prepare is not None:
        if record.modules:
            lines.append("")
        lines.append(f"Definitions its `prepare` loads alone: {_first_paragraph(record.prepare)}")
    lines += ["", "## Entry points", "", "The first entry of a method whose symbols are all present serves it.", ""]
    rows = []
    for entry in record.entries:
        names = [_called(record.symbols[c]) if c in record.symbols else c for c in entry.calls]
        rows.append(
            (
                code(entry.serves),
                ", ".join(code(n) for n in names),
                ", ".join(sorted(entry.declares)),
                entry.since or "required",
                _first_paragraph(entry.translate),
            )
        )
    lines += table(("method", "calls", "brings", "may be absent", "translation"), rows)
    lacking = [(code(e.serves), capability, why) for e in record.entries for capability, why in e.lacks.items()]
    if lacking:
        lines += ["", "Options a path does not honour:", ""]
        lines += table(("method", "capability", "why"), lacking)
    if record.options:
        lines += ["", "## Options, declared by presence", ""]
        rows = [(o.capability, o.extends, " or ".join(_condition(w) for w in o.when)) for o in record.options]
        lines += table(("capability", "refines", "declared when present"), rows)
    if record.not_declared:
        lines += ["", "## Not declared", ""]
        lines += table(("capability", "why"), sorted(record.not_declared.items()))
    if record.placeholders:
        lines += ["", "## Stand-ins for modules it imports", ""]
        rows = [(code(p.name), p.scope + (", replaces" if p.replaces else ""), p.why) for p in record.placeholders]
        lines += table(("module", "scope", "why"), rows)
    if record.deselect:
        lines += ["", "## Left out of history replays", ""]
        lines += table(("checks (-k)", "why", "cost"), [(code(d.keyword), d.reason, d.cost) for d in record.deselect])
    return lines + [""]


def _newest_run(name: str, snapshot: dict | None) -> list[str]:
    lines = ["## Newest gate run", ""]
    if snapshot is None:
        run = f"`python -m harness.gate {name}=PATH` (or `{name}==X`)"
        return lines + [f"None recorded: run {run}, then `nox -s docs`.", ""]
    about = snapshot["about"]
    counts = store.outcomes(snapshot)
    lines += [
        f"`{about['spec']}` on {about['date']} (harness {about['harness']}, profile {about.get('profile') or '-'}): "
        f"exit code {snapshot['exit_code']}; {counts}. Every cell: [the conformance page](../conformance.html#{name}).",
        "",
    ]
    if about.get("note"):
        lines += [f"Note: {about['note']}.", ""]
    failing = [r for r in snapshot["rows"] if r["outcome"] not in ("PASS", "UNSUPPORTED")]
    if failing:
        rows = [(code(r["id"]), r["output"] or "(the check)", r["tier"], r["outcome"]) for r in failing]
        lines += table(("check", "output", "tier", "outcome"), rows) + [""]
    return lines


def _called(symbol) -> str:
    """A symbol's names (current first), or a method's own description (``upstream.family.Method``)."""
    describe = getattr(symbol, "describe", None)
    return describe() if describe is not None else " / ".join(symbol.names)


def _condition(when) -> str:
    return code(when) if isinstance(when, str) else cell(_first_paragraph(when) or "a fact of the revision")


def _expectations(record) -> list[str]:
    lines = ["## Known failures", ""]
    files = [ROOT / "expectations" / name for name in record.expectations]
    present = [path for path in files if path.is_file()]
    if not present:
        return lines + ["None: every check that runs is expected to pass.", ""]
    for path in present:
        entries = sorted(expectations.load(path).values(), key=lambda e: (e.id, e.output or ""))
        lines += [f"`expectations/{path.name}`: {len(entries)} entries.", ""]
        rows = [
            (
                code(e.id),
                e.output if e.output else ("(the check)" if e.output == "" else "(any)"),
                e.tier or "-",
                e.kind or "-",
                " ".join(f"{c}" for c in (e.versions, f"before {e.before}" if e.before else "") if c) or "-",
                e.reason,
            )
            for e in entries
        ]
        lines += table(("check", "output", "tier", "kind", "holds for", "reason"), rows)
        lines.append("")
    return lines
