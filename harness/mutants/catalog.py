"""The historic bugs re-created as small, named source changes to ``impl/``.

Each Mutant is an exact snippet of an ``impl`` module and its replacement,
applied at import time when ``LPH_MUTANT=<name>`` is set (loader.py), in the
test process AND in every rank process. It names the regression tests that
must fail on it and the target they run against (``impl``, or
``impl-triton`` for the bugs re-created in the Triton backend, whose
regressions then run under Triton's CPU interpreter): ``nox -s mutants`` (and ``tests/test_mutants.py`` inside
``nox -s tests``) proves that they do. If ``impl`` changes so a snippet no
longer matches, applying the mutant fails loudly instead of testing nothing.
"""

from __future__ import annotations

from harness.mutants.historic import HISTORIC
from harness.mutants.input_classes import INPUT_CLASSES
from harness.mutants.mutant import Mutant
from harness.mutants.policy import POLICY
from harness.mutants.sampling import SAMPLING
from harness.mutants.topology import TOPOLOGY
from harness.mutants.triton import TRITON

__all__ = ["MUTANTS", "Mutant", "by_name"]

# Grouped by concern, one module each; the order is the order the mutant check runs them in.
MUTANTS: tuple[Mutant, ...] = HISTORIC + POLICY + TOPOLOGY + TRITON + SAMPLING + INPUT_CLASSES


def by_name(name: str) -> Mutant:
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise KeyError(f"LPH_MUTANT={name!r} is not a known mutant; known: {[m.name for m in MUTANTS]}")
