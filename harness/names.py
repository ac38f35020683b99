"""One way to name a function across process and report boundaries: ``'package.module:attr'``.

Rank processes import their job by this name (functions do not cross a spawn),
replay lines name the check they rerun by it, and the gate re-runs a check
from a verdict by it. Every stage resolves names here, so the format and its
errors are the same everywhere. (Target specs also accept ``path/to/file.py:attr``
and are resolved by ``harness.targets``.)

Replay lines written before the checks became the package ``harness.checks``
name ``harness.checks:check_...``; ``resolve`` still finds those checks in the
package's modules, so an old report's replay line keeps working.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable

OLD_CHECKS = "harness.checks"  # the module every check lived in before it became a package
MUTANT_VARIABLE = "LPH_MUTANT"  # the mutant a process runs (harness.mutants.loader applies it at import)


def replay_environment(environ=os.environ) -> str:
    """What a replay line must set to rerun what ``environ`` runs: ``LPH_MUTANT=NAME `` for a mutant, else nothing.

    A mutant's failure pasted as ``--target impl`` alone would run unmutated impl and pass. (Here, not in
    ``harness.mutants``, so the checks and the gate name a replay without importing the mutants' package.)
    """
    name = environ.get(MUTANT_VARIABLE)
    return f"{MUTANT_VARIABLE}={name} " if name else ""


def _checks_modules() -> list[str]:
    """The modules of the package ``harness.checks``, where a name written as ``harness.checks:NAME`` now lives."""
    package = importlib.import_module(OLD_CHECKS)
    return [f"{OLD_CHECKS}.{module.name}" for module in pkgutil.iter_modules(package.__path__)]


def name_of(function: Callable) -> str:
    """``'module:function'`` of a module-level function."""
    return f"{function.__module__}:{function.__name__}"


def resolve(name: str):
    """The object ``'package.module:attr'`` names; a clear error for a malformed or unknown name."""
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{name!r}: expected 'package.module:attr'")
    candidates = _checks_modules() if module_name == OLD_CHECKS else (module_name,)
    for candidate in candidates:
        found = getattr(importlib.import_module(candidate), attr, None)
        if found is not None:
            return found
    raise AttributeError(f"{name!r}: {module_name} has no attribute {attr!r}")
