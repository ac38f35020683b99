"""Every upstream family, one record each: what the gate, the history, the bench and ``--target`` read.

A family on the kernel is a ``Family`` record (``harness/targets/upstream/family.py``) in its own package,
named here by ``module:attr`` and imported only when used. A family still on its old adapter is a ``Legacy``
record: where it is (the same ``Locate``), its adapter class (which finds the checkout through the family's
variable), its expectations; the files its replays key by are its adapter's ``files_under_test``. A family
moves from the second list to the first when it is migrated; nothing else names families.

``harness.targets.registry:NAME`` is a zero-argument factory for ``--target`` and the gate's cache key:
the family at ``$LPH_<FAMILY>_PATH`` (or installed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

from harness.names import resolve
from harness.targets.upstream.combined import WithHidden
from harness.targets.upstream.locate import Locate

ON_KERNEL = {
    "slime": "harness.targets.slime.family:SLIME",
    "miles": "harness.targets.slime.family:MILES",
    "skyrl": "harness.targets.skyrl.family:SKYRL",
    "nemo_rl": "harness.targets.nemo_rl.family:NEMO_RL",
    "te": "harness.targets.transformer_engine.family:TE",
    "liger": "harness.targets.liger.family:LIGER",
    "trl": "harness.targets.trl.family:TRL",
    "verl": "harness.targets.verl.family:VERL",
    "ms_swift": "harness.targets.ms_swift.family:MS_SWIFT",
}


@dataclass(frozen=True)
class Legacy:
    """A family on its old adapter (see the module docstring)."""

    name: str
    locate: Locate
    adapter: str  # module:attr of the adapter class
    expectations: tuple[str, ...]
    deselect: tuple = ()
    hidden: str | None = None  # module:attr of its hidden-state adapter: the family target carries that path too

    def target(self, where=None):
        if where is not None:
            os.environ[self.locate.variable] = str(where)  # the old adapters find their checkout through it
        family = resolve(self.adapter)()
        return family if self.hidden is None else WithHidden(family, resolve(self.hidden))

    @property
    def files(self) -> tuple[str, ...]:
        adapters = [resolve(self.adapter), *([resolve(self.hidden)] if self.hidden else [])]
        return tuple(dict.fromkeys(f for a in adapters for f in (getattr(a, "files_under_test", ()) or ())))


# name, import name, marker file, adapter class, PyPI distribution (None: checkouts only)
_LEGACY_ROWS = (
    ("vllm", "vllm", "vllm/v1/sample/ops/topk_topp_sampler.py", "vllm.sampler:VllmSamplerTarget", "vllm"),
)  # fmt: skip
# The hidden-state paths of families on their old adapters, and the expectations those paths add.
_HIDDEN: dict = {}
LEGACY = {
    name: Legacy(
        name,
        Locate(package, marker, f"LPH_{name.upper()}_PATH", pypi),
        f"harness.targets.{adapter}",
        (f"{name}.toml", *_HIDDEN.get(name, (None, ()))[1]),
        hidden=_HIDDEN.get(name, (None,))[0],
    )
    for name, package, marker, adapter, pypi in _LEGACY_ROWS
    if name not in ON_KERNEL
}


def names() -> tuple[str, ...]:
    return (*ON_KERNEL, *LEGACY)


@cache
def family(name: str):
    """The record of ``name`` (a ``Family`` or a ``Legacy``); a KeyError listing the families."""
    if name in ON_KERNEL:
        return resolve(ON_KERNEL[name])
    if name in LEGACY:
        return LEGACY[name]
    raise KeyError(f"no family {name!r}; families: {', '.join(names())}")


def target(name: str, where=None):
    """The family's target at ``where`` (a checkout or install directory; None: its variable, else installed)."""
    return family(name).target(where)


def executed_files(name: str, built) -> tuple[str, ...]:
    """The files a history keys ``name``'s revisions by: what the loader executed, else the legacy list."""
    executed = getattr(built, "executed", None)
    return tuple(executed) if executed is not None else family(name).files


def __getattr__(name: str):
    """``harness.targets.registry:slime``: a factory of the family at its variable (see the module docstring)."""
    if name in ON_KERNEL or name in LEGACY:
        return lambda: target(name)
    raise AttributeError(name)
