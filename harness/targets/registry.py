"""Every upstream family, one record each: what the gate, the history, the bench and ``--target`` read.

A family is a ``Family`` record (``harness/targets/upstream/family.py``) in its own package, named here by
``module:attr`` and imported only when used; nothing else names families. The files a history keys a family's
revisions by are the ones its loader executed (``FamilyTarget.executed``).

``harness.targets.registry:NAME`` is a zero-argument factory for ``--target`` and the gate's cache key:
the family at ``$LPH_<FAMILY>_PATH`` (or installed).
"""

from __future__ import annotations

from functools import cache

from harness.names import resolve

FAMILIES = {
    "slime": "harness.targets.slime.family:SLIME",
    "miles": "harness.targets.slime.family:MILES",
    "skyrl": "harness.targets.skyrl.family:SKYRL",
    "nemo_rl": "harness.targets.nemo_rl.family:NEMO_RL",
    "te": "harness.targets.transformer_engine.family:TE",
    "liger": "harness.targets.liger.family:LIGER",
    "trl": "harness.targets.trl.family:TRL",
    "verl": "harness.targets.verl.family:VERL",
    "ms_swift": "harness.targets.ms_swift.family:MS_SWIFT",
    "vllm": "harness.targets.vllm.family:VLLM",
}


def names() -> tuple[str, ...]:
    return tuple(FAMILIES)


@cache
def family(name: str):
    """The ``Family`` record of ``name``; a KeyError listing the families."""
    if name not in FAMILIES:
        raise KeyError(f"no family {name!r}; families: {', '.join(names())}")
    return resolve(FAMILIES[name])


def target(name: str, where=None):
    """The family's target at ``where`` (a checkout or install directory; None: its variable, else installed)."""
    return family(name).target(where)


def __getattr__(name: str):
    """``harness.targets.registry:slime``: a factory of the family at its variable (see the module docstring)."""
    if name in FAMILIES:
        return lambda: target(name)
    raise AttributeError(name)
