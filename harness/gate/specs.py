"""SPEC strings (what a maintainer types) to the target the suite runs, and its environment.

The grammar is the targets' own (``harness/targets/spec.py``: ``impl``,
``impl-triton``, ``FAMILY=PATH``, ``FAMILY==X``, ``module:attr``,
``path/to/adapter.py:attr``), the families the registry's
(``harness/targets/registry.py``); the gate adds ``mutant=NAME``: impl/
carrying one re-created historic bug (the gate's own tests and demos).

A family SPEC runs the suite with ``--target`` set to its canonical form (a
checkout's path made absolute), so every replay line it prints names the
checkout or the release and runs when pasted; the family's variable is set
too (``LPH_<FAMILY>_PATH``), which the base cache's key and the cross-side
replays read. A family's expectations are the files its record names.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from harness import ROOT
from harness.targets import registry
from harness.targets import spec as target_spec

PACKAGES = target_spec.PACKAGES
# The families the gate knows by name, each with its zero-argument factory (``harness.targets.registry``).
ADAPTERS = {name: f"harness.targets.registry:{name}" for name in registry.names()}
CHECKOUT_VARIABLES = {name: registry.family(name).locate.variable for name in registry.names()}
PYPI = {name for name in registry.names() if registry.family(name).locate.pypi}
PIP_NAMES = {name: registry.family(name).locate.pypi for name in PYPI}


@dataclass
class ResolvedSpec:
    spec: str
    target: str
    slug: str
    family: str | None = None
    env: dict = field(default_factory=dict)
    pip_requirement: str | None = None  # installed into ``env``'s path before the run
    run_as: str = ""  # what pytest's --target gets (the canonical spec; default: ``target``)

    def __post_init__(self):
        self.run_as = self.run_as or self.target


def slug_of(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "target"


def git_revision(path: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return path.name


def hypothesis_profile() -> str:
    """The Hypothesis profile a run draws its examples with (``harness.pytest_plugin`` registers them)."""
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return os.environ["HYPOTHESIS_PROFILE"]
    return "ci" if os.environ.get("CI") else "dev"


def harness_revision() -> str:
    """This harness's commit, marked when the tree it ran from had uncommitted changes to tracked files."""
    revision = git_revision(ROOT)
    status = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return f"{revision} with uncommitted changes" if status.returncode == 0 and status.stdout.strip() else revision


def resolve(spec: str) -> ResolvedSpec:
    """Parse a SPEC; a malformed one is a clear error listing the accepted forms."""
    if spec.startswith("mutant="):
        return _mutant(spec)
    try:
        parsed = target_spec.parse(spec)
    except ValueError as exc:
        raise ValueError(f"{str(exc).replace('unknown target', 'unknown SPEC', 1)} (or mutant=NAME)") from None
    if parsed.kind == "impl":
        return ResolvedSpec(spec, spec, spec)
    if parsed.kind == "adapter":
        return ResolvedSpec(spec, spec, slug_of(spec))
    family = parsed.family
    env = {CHECKOUT_VARIABLES[family]: str(parsed.directory)}
    if parsed.kind == "release":
        requirement = f"{PIP_NAMES[family]}=={parsed.where}"
        return ResolvedSpec(spec, ADAPTERS[family], f"{family}-{parsed.where}", family, env, requirement, parsed.text)
    slug = f"{family}-{git_revision(parsed.directory)}"
    return ResolvedSpec(spec, ADAPTERS[family], slug, family, env, run_as=parsed.text)


def expectation_files(family: str | None) -> tuple[Path, ...]:
    """The shipped expectations of ``family`` that exist (its record names them, ``expectations/``)."""
    if not family:
        return ()
    names = registry.family(family).expectations
    return tuple(path for path in (ROOT / "expectations" / name for name in names) if path.is_file())


def _mutant(spec: str) -> ResolvedSpec:
    """``mutant=NAME``: impl/ with one historic bug re-created (harness/mutants/catalog.py), for demos and tests."""
    from harness.mutants.catalog import by_name

    name = spec.partition("=")[2]
    try:
        by_name(name)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    return ResolvedSpec(spec, "impl", f"mutant-{name}", None, {"LPH_MUTANT": name})


def install(resolved: ResolvedSpec) -> None:
    """Install a PyPI SPEC into its own directory (once), without dependencies."""
    if resolved.pip_requirement is not None:
        target_spec.install(target_spec.parse(resolved.run_as))
