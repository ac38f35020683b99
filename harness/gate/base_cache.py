"""Base verdicts cached by what they depend on, so a pull request's gate costs one suite run.

Base vs PR runs the suite twice; the base side is the same for every push to
a pull request (and for every pull request on the same base), so its
verdicts are cached under a key made of everything they depend on:

* this harness: the contents of its checks, oracles, impl and settings
  (``suite_fingerprint``); a changed suite reruns;
* the target: a PyPI release's requirement; a checkout's Python sources
  (their contents, not its commit: a base whose code under test did not
  change reuses the verdicts, as the history replay does with blob ids);
  an adapter file's contents; impl and its mutants through the suite itself;
* the run: the pytest arguments, the Hypothesis profile and the target's environment.

A target the key cannot describe (a ``module:attr`` adapter from an
installed package) is never cached. The CI workflow (``ci/upstream-gate.yml``)
restores and saves the cache directory between runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from harness import ROOT
from harness.gate.specs import ResolvedSpec
from harness.gate.verdicts import Run

# What the verdicts of a run depend on, inside this repository.
SUITE_PARTS = ("harness", "impl", "oracles", "properties", "regressions", "conftest.py", "pyproject.toml")
SUFFIXES = (".py", ".toml")
# Directories of a checkout that hold no code under test.
SKIPPED_DIRECTORIES = {".git", "tests", "test", "docs", "examples", "__pycache__", ".packages"}
ENVIRONMENT = ("HYPOTHESIS_PROFILE", "CI", "LPH_MUTANT")


def _files(root: Path, skip: set[str] = frozenset()):
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*")):
        if path.suffix in SUFFIXES and path.is_file() and not skip.intersection(path.relative_to(root).parts):
            yield path


def _digest(paths, relative_to: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(relative_to)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def suite_fingerprint(root: Path = ROOT) -> str:
    """The contents of everything in this repository a verdict depends on."""
    paths = [path for part in SUITE_PARTS for path in _files(root / part, {"__pycache__"})]
    return _digest(paths, root)


def target_fingerprint(resolved: ResolvedSpec) -> str | None:
    """What the target's verdicts depend on outside this repository; None when it cannot be described."""
    if resolved.pip_requirement:
        return resolved.pip_requirement
    if resolved.target in ("impl", "impl-triton"):
        return resolved.target  # impl is part of the suite's fingerprint
    if resolved.family and resolved.env:
        checkout = Path(next(iter(resolved.env.values())))
        return _digest(_files(checkout, SKIPPED_DIRECTORIES), checkout)
    path = Path(resolved.target.rsplit(":", 1)[0])
    if path.suffix == ".py" and (ROOT / path).is_file():
        return _digest([ROOT / path], ROOT)
    return None


def key(resolved: ResolvedSpec, pytest_args: list[str], environ=os.environ) -> str | None:
    """The cache key of ``resolved``'s verdicts under these arguments; None: not cacheable."""
    target = target_fingerprint(resolved)
    if target is None:
        return None
    # A checkout's path or a package directory is not what the verdicts depend on: its contents are (above).
    given = {name: value for name, value in resolved.env.items() if not name.startswith("LPH_") or name in ENVIRONMENT}
    environment = {name: environ.get(name, "") for name in ENVIRONMENT} | given
    body = [suite_fingerprint(), resolved.target, target, list(pytest_args), sorted(environment.items())]
    return hashlib.sha256(json.dumps(body).encode()).hexdigest()[:20]


def load(directory: Path, cache_key: str | None) -> Run | None:
    if cache_key is None:
        return None
    path = Path(directory) / cache_key
    return Run.load(path) if (path / "verdicts.json").is_file() else None


def save(directory: Path, cache_key: str | None, run: Run) -> None:
    if cache_key is not None:
        run.save(Path(directory) / cache_key)
