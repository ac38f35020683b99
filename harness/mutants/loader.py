"""Apply the mutant named by ``LPH_MUTANT`` as a source patch at import time.

A meta-path finder serves the mutated module's source with the one snippet
replaced, so every process that imports ``impl`` (the test process and each
spawned rank, which inherit the environment) runs the buggy code, and no file
on disk changes. Installed from ``harness/__init__.py`` before anything
imports ``impl``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import linecache
import os
import sys
from pathlib import Path

from harness.mutants.catalog import Mutant, by_name
from harness.names import MUTANT_VARIABLE as ENV_VAR


class MutantDoesNotApply(RuntimeError):
    """The snippet a mutant replaces is no longer in ``impl``: update the catalog."""


def mutated_source(mutant: Mutant, source: str) -> str:
    count = source.count(mutant.original)
    if count != 1:
        raise MutantDoesNotApply(
            f"mutant {mutant.name!r}: expected its snippet exactly once in {mutant.module}, found {count} times; "
            "update harness/mutants/catalog.py"
        )
    return source.replace(mutant.original, mutant.replacement)


class _MutantLoader(importlib.abc.Loader):
    def __init__(self, mutant: Mutant, origin: str):
        self.mutant, self.origin = mutant, origin

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = mutated_source(self.mutant, Path(self.origin).read_text())
        filename = f"{self.origin} [mutant {self.mutant.name}]"
        # Triton's @jit reads a kernel's source with inspect: serve the mutated text under the compiled name.
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        exec(compile(source, filename, "exec"), module.__dict__)


class _MutantFinder(importlib.abc.MetaPathFinder):
    def __init__(self, mutant: Mutant):
        self.mutant = mutant

    def find_spec(self, fullname, path, target=None):
        if fullname != self.mutant.module:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None
        spec.loader = _MutantLoader(self.mutant, spec.origin)
        return spec


def install_from_env() -> Mutant | None:
    """Install the finder for ``$LPH_MUTANT`` (idempotent); None when no mutant is asked for."""
    name = os.environ.get(ENV_VAR)
    if not name:
        return None
    mutant = by_name(name)
    if any(isinstance(f, _MutantFinder) for f in sys.meta_path):
        return mutant
    if mutant.module in sys.modules:
        raise MutantDoesNotApply(f"{mutant.module} was imported before the mutant could be installed")
    sys.meta_path.insert(0, _MutantFinder(mutant))
    return mutant
