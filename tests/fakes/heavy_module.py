"""A module whose top-level imports need packages that are not installed (harness/targets/upstream/symbols.py).

Never imported as a whole: ``load_symbol`` takes single symbols out of it.
"""

from __future__ import annotations

import math

import lph_absent_trainer  # noqa: F401  (never installed: loading the whole module fails here)
from lph_absent_package import registry

SCALE = 2.0


def _helper(x):
    return x * SCALE


def wanted(x: registry.Tensor) -> float:
    """Needs math, _helper and SCALE; its annotation names registry, which is never evaluated."""
    return math.sqrt(_helper(x))


def needs_registry():
    return registry.lookup("x")


class Wanted:
    factor = SCALE

    def apply(self, x):
        return _helper(x) * self.factor


if SCALE:
    HIDDEN = 1


def uses_hidden():
    return HIDDEN


class HeavyTrainer(registry.Trainer):
    """Derives from a class of a package that is not installed: only its methods can be loaded (load_method)."""

    def loss(self, x):
        return _helper(x) + self.offset

    def step(self, batch):
        """An older revision's form: the composition a closure over the method's locals (load_inner)."""
        scale = batch["scale"]

        def processor(x):
            return _helper(x) * scale + self.offset

        return processor
