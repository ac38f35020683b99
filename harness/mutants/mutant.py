"""One named source change to ``impl/``: the snippet, its replacement, the checks that must fail on it.

The catalog of them is ``harness/mutants/catalog.py``; the loader applies one at import time. ``probe``, where
set, names (``module:function``, harness/names.py) a ``harness.mutants.probes`` function asking whether the
mutated operation changes any bits on this machine at all: a mutant whose effect a BLAS decides is reported
EQUIVALENT HERE, with the probe's figure, on a machine where it changes none (runner.py).

``bug_class`` groups the mutants that break one contract the same way (a historic bug, the metadata agreement,
a policy option's formula, ...). ``nox -s tests`` runs the ``representative`` of each class; ``nox -s slow``
runs the others (tests/test_mutants.py), so the CI gate still proves every class is caught.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    module: str
    original: str
    replacement: str
    killed_by: tuple  # the files (or ``file::check`` node ids) that must fail on it, and only they may
    target: str = "impl"
    probe: str | None = None
    bug_class: str = ""
    representative: bool = False
