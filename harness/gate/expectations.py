"""Known upstream failures: one entry per failing output of a check, each with a true one-line reason.

The file is TOML, one file per target family (``expectations/slime.toml``,
``expectations/skyrl.toml``; any file with ``--expectations PATH``)::

    [[known]]
    id = "regressions/test_inplace_version_counter.py::test_second_backward_through_retained_graph"
    output = "grad(logits)"  # the output that fails ("" : the check as a whole; harness/checks/subtests.py)
    kind = "error"
    signature = { exception = "RankError", message = "job ... failed on rank(s) [#]: ...", magnitude = "" }
    reason = "the entropy backward multiplies a tensor it saved for backward in place"
    link = "https://github.com/NovaSky-AI/SkyRL/issues/1648"
    versions = "<0.4"        # optional: only for releases in this PEP 440 range (PyPI specs)
    before = "4f1c2e9"       # optional: only for checkouts that do not contain this commit
    device = "cpu"           # optional: only for runs on this device type (how the target runs there)

The reason says what is wrong UPSTREAM (never "flaky", never "the harness
is strict"); a check is expected to fail, never loosened to pass. Only
``FAIL`` is an expected outcome; ``kind`` and ``signature`` say HOW it fails
(``harness/checks/signature.py``: the exception type, the message class, the
error's magnitude, the conditions it needs): a known output that fails
another way is its own outcome, FAILS DIFFERENTLY (web-platform-tests keeps
the expected status per subtest the same way). A field the signature leaves
out accepts anything. An entry without ``output`` (a file written before
sub-verdicts) stands for whichever outputs of its check fail, judged by
``kind`` alone. ``versions`` and ``before`` let one file serve a family's
history; ``device`` marks a failure of the path a target takes on one device
type only (TransformerEngine's CPU path runs past its CUDA-only input
validation). ``--update-expectations`` rewrites the file from a run, one entry
per failing output with the signature it failed with, keeping the reasons
and conditions already written (an output's own entry, else its check's
entry without an output), and marking new entries for a human to explain;
entries for checks the run did not include (a run of some test files only)
are kept as they are, and so is the file's header comment.
"""

from __future__ import annotations

import subprocess
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.checks.failure import FAILURE_KINDS
from harness.checks.signature import FIELDS as signature_fields
from harness.gate.specs import ADAPTERS
from harness.gate.units import units_of
from harness.gate.verdicts import FAIL, Run
from harness.ranks.device import DEVICE_TYPES

FAMILIES = tuple(ADAPTERS)

EXPECTATIONS_DIR = Path(__file__).resolve().parents[2] / "expectations"
TO_EXPLAIN = "TO EXPLAIN: "


CONDITIONS = ("versions", "before", "device")
KEYS = ("id", "output", "reason", "link", "outcome", "tier", "kind", "signature", *CONDITIONS)
SIGNATURE_KEYS = tuple(name for name in signature_fields if name != "kind")


@dataclass(frozen=True)
class Expectation:
    id: str
    reason: str
    link: str = ""
    outcome: str = FAIL
    tier: str = ""
    kind: str = ""  # how the check fails; empty: any failure
    versions: str = ""  # PEP 440 specifier: the entry holds only for releases in it
    before: str = ""  # a commit: the entry holds only for checkouts that do not contain it
    device: str = ""  # "cpu" or "cuda": the entry holds only for runs on that device type
    output: str | None = None  # the failing output ("" : the check as a whole); None: any output (older files)
    signature: tuple = ()  # (name, value) pairs of harness/checks/signature.py's fields, without the kind

    @property
    def key(self) -> tuple[str, str | None]:
        return self.id, self.output

    @property
    def expected_signature(self) -> dict:
        """The signature this entry expects (its kind included); absent fields accept anything."""
        return {"kind": self.kind, **{name: value for name, value in self.signature}}


@dataclass(frozen=True)
class Revision:
    """What the conditions of an entry are evaluated on: a release's version or a checkout, the device type."""

    version: str = ""
    checkout: str = ""
    device: str = ""

    def contains(self, commit: str) -> bool | None:
        """Whether the checkout's HEAD contains ``commit`` (None: not a git checkout, or unknown commit)."""
        if not self.checkout:
            return None
        command = ["git", "-C", self.checkout, "merge-base", "--is-ancestor", commit, "HEAD"]
        try:
            code = subprocess.run(command, capture_output=True).returncode
        except OSError:
            return None
        return {0: True, 1: False}.get(code)


def holds(entry: Expectation, revision: Revision) -> tuple[bool, str]:
    """(does the entry apply to ``revision``, a note when a condition could not be evaluated)."""
    if entry.versions:
        if not revision.version:
            return True, f"`{entry.id}`: versions {entry.versions!r} not evaluated (the target is no release)"
        try:
            if Version(revision.version) not in SpecifierSet(entry.versions):
                return False, ""
        except InvalidVersion:
            return True, f"`{entry.id}`: version {revision.version!r} is not PEP 440; condition not evaluated"
    if entry.before:
        contained = revision.contains(entry.before)
        if contained is None:
            return True, f"`{entry.id}`: before {entry.before!r} not evaluated (no git checkout holding it)"
        if contained:
            return False, ""
    if entry.device:
        if not revision.device:
            return True, f"`{entry.id}`: device {entry.device!r} not evaluated (the run's device is not recorded)"
        if revision.device != entry.device:
            return False, ""
    return True, ""


def applicable(entries: dict[tuple, Expectation], revision: Revision) -> tuple[dict[tuple, Expectation], list[str]]:
    """The entries that hold for ``revision``, and notes on conditions that could not be evaluated."""
    kept, notes = {}, []
    for key, entry in entries.items():
        applies, note = holds(entry, revision)
        if applies:
            kept[key] = entry
        if note:
            notes.append(note)
    return kept, notes


def load(path: Path | str) -> dict[tuple, Expectation]:
    """Parse an expectations file into entries keyed by (check id, output; None for any output); a malformed
    entry is a clear error naming the file and the entry."""
    path = Path(path)
    try:
        body = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"--expectations {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--expectations {path}: not valid TOML: {exc}") from None
    entries: dict[tuple, Expectation] = {}
    for number, entry in enumerate(body.get("known", []), start=1):
        missing = [key for key in ("id", "reason") if not entry.get(key)]
        if missing:
            raise ValueError(f"{path}: [[known]] entry {number} lacks {missing}")
        unknown = set(entry) - set(KEYS)
        if unknown:
            raise ValueError(f"{path}: [[known]] entry {number} ({entry['id']}) has unknown keys {sorted(unknown)}")
        if entry.get("outcome", FAIL) != FAIL:
            raise ValueError(f"{path}: entry {entry['id']}: outcome must be {FAIL!r}")
        output = entry.get("output")
        if output is not None and not isinstance(output, str):
            raise ValueError(f"{path}: entry {entry['id']}: output must be a string, got {output!r}")
        if (entry["id"], output) in entries:
            where = f" [{output}]" if output else ""
            raise ValueError(f"{path}: {entry['id']}{where} is listed twice")
        expected_signature = entry.get("signature", {})
        if not isinstance(expected_signature, dict) or set(expected_signature) - set(SIGNATURE_KEYS):
            raise ValueError(
                f"{path}: entry {entry['id']}: signature must be a table of {SIGNATURE_KEYS}, "
                f"got {expected_signature!r}"
            )
        kind = entry.get("kind", "")
        if kind and kind not in FAILURE_KINDS:
            raise ValueError(f"{path}: entry {entry['id']}: kind {kind!r} is none of {FAILURE_KINDS}")
        if entry.get("versions"):
            try:
                SpecifierSet(entry["versions"])
            except InvalidSpecifier:
                raise ValueError(
                    f"{path}: entry {entry['id']}: versions {entry['versions']!r} is no PEP 440 range"
                ) from None
        if entry.get("device") and entry["device"] not in DEVICE_TYPES:
            raise ValueError(f"{path}: entry {entry['id']}: device {entry['device']!r} is none of {DEVICE_TYPES}")
        fields = {key: entry.get(key, "") for key in ("link", "tier", "kind", *CONDITIONS)}
        pairs = tuple(
            (name, tuple(value) if isinstance(value, list) else value)
            for name, value in sorted(expected_signature.items())
        )
        entries[(entry["id"], output)] = Expectation(
            entry["id"], entry["reason"], output=output, signature=pairs, **fields
        )
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


def _value(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_quote(str(item)) for item in value) + "]"
    return _quote(str(value))


def _entry(entry: Expectation) -> list[str]:
    lines = ["", "[[known]]", f"id = {_quote(entry.id)}"]
    if entry.output is not None:
        lines.append(f"output = {_quote(entry.output)}")
    for key in ("tier", "kind"):
        if getattr(entry, key):
            lines.append(f"{key} = {_quote(getattr(entry, key))}")
    fields = [(name, value) for name, value in entry.signature if value not in ("", (), [])]
    if fields:
        lines.append("signature = { " + ", ".join(f"{name} = {_value(value)}" for name, value in fields) + " }")
    for key in ("reason", "link", *CONDITIONS):
        value = getattr(entry, key)
        if value or key == "reason":
            lines.append(f"{key} = {_quote(value)}")
    return lines


def _signature_pairs(found: dict) -> tuple:
    return tuple(
        (name, tuple(found[name]) if isinstance(found.get(name), list) else found.get(name, ""))
        for name in SIGNATURE_KEYS
    )


def render(run: Run, previous: dict[tuple, Expectation], header: str) -> str:
    """The expectations file for ``run``: one entry per failing output with its signature, the written reasons,
    links and conditions kept (the output's own entry, else its check's entry without an output), new ones
    marked TO EXPLAIN; the previous entries of checks this run did not include, unchanged."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    checks = run.checks()
    failing = [unit for verdict in checks.values() if verdict.outcome == FAIL for unit in units_of(verdict)]
    for unit in sorted((u for u in failing if u.outcome == FAIL), key=lambda u: (u.tier, u.id, u.output)):
        known = previous.get((unit.id, unit.output)) or previous.get((unit.id, None))
        known = known or Expectation(unit.id, TO_EXPLAIN + unit.reason)
        pairs = _signature_pairs(unit.signature)
        lines += _entry(replace(known, output=unit.output, tier=unit.tier, kind=unit.kind, signature=pairs))
    for known in sorted(previous.values(), key=lambda e: (e.tier, e.id, e.output or "")):
        if known.id not in checks:
            lines += _entry(known)
    return "\n".join(lines) + "\n"
