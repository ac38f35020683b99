"""Stand-ins for what slime's (and miles') log-prob modules import besides ``megatron.core.mpu`` (adapter.py).

Written here from the upstream SIGNATURES and documented behaviour only; no
upstream code is copied.

* ``megatron.core.fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy``:
  the vocab-parallel cross-entropy that slime's older ``compute_log_probs``
  (and miles') wraps: ``harness/targets/upstream/megatron_cross_entropy.py``
  (it overwrites its fp32 input with the softmax, as Megatron's does).
* absent third-party dependencies: slime's utility modules import ``ray`` and
  ``httpx`` at module level (``slime.utils.misc`` / ``http_utils``, pulled in
  by the loss module) for functions the adapter never calls; revisions of
  2025-06/07 also import ``wandb`` and two Megatron modules from their data
  module (``MEGATRON_IMPORT_ONLY``). While slime is
  being loaded, those, when not installed, are given placeholder modules
  whose every use raises a clear error; the placeholders are removed from
  ``sys.modules`` once loading is done, so no other code ever sees them. The
  list is explicit (``IMPORT_ONLY``): no module slime's log-prob code imports
  inside ``try``/``except ImportError`` (none does, in its whole history) may
  be silently replaced, and any other missing package fails the load loudly.
* ``SlimeArgs``: the ``argparse.Namespace`` slime's functions read their
  settings from, raising an error that names a setting the adapter did not
  provide (an unknown revision reading a new option fails loudly).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass

import torch.distributed as dist

from harness.targets.upstream import megatron_cross_entropy, megatron_stand_in
from harness.targets.upstream.settings import StrictSettings

# ---- megatron.core.fusions.fused_cross_entropy (harness/targets/upstream/megatron_cross_entropy.py) ----------


def install_megatron_fusions() -> None:
    """Register Megatron's cross-entropy stand-ins next to the mpu stand-in (real Megatron: untouched)."""
    megatron_cross_entropy.install()


# ---- absent third-party dependencies ------------------------------------------------------


class AbsentDependency(types.ModuleType):
    """A placeholder for a package that is not installed: its attributes are placeholders, calling one raises."""

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _absent(f"{self.__name__}.{attribute}")


class _Absent(type):
    """Placeholders are classes (so ``httpx.AsyncClient | None`` annotations evaluate) that refuse to be used."""

    def __getattr__(cls, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _absent(f"{cls.__qualname__}.{attribute}")

    def __call__(cls, *args, **kwargs):
        raise ModuleNotFoundError(
            f"{cls.__qualname__} was used, but its package is not installed: the slime adapter only loads "
            "slime's log-prob code, and this call lies outside it"
        )


def _absent(name: str) -> type:
    return _Absent(name.rpartition(".")[2], (), {"__qualname__": name})


# Packages slime's log-prob modules import at module level but use only in functions the adapter never calls.
IMPORT_ONLY = ("ray", "httpx", "wandb")


class _AbsentFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: answers only for ``names`` (and their submodules) that nothing else found."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.created: list[str] = []

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = AbsentDependency(spec.name)
        module.__path__ = []
        self.created.append(spec.name)
        return module

    def exec_module(self, module):
        return None


# Megatron modules slime's older data module (2025-06/07, imported by the loss module) imports at module level for
# functions the adapter never calls. Under the mpu stand-in ``megatron.core`` is a plain module, so they cannot be
# found by a finder: they are placed in ``sys.modules`` directly, and only while slime loads.
MEGATRON_IMPORT_ONLY = ("megatron.core.packed_seq_params", "megatron.core.utils")


@contextmanager
def absent_dependencies(names: tuple[str, ...] = IMPORT_ONLY, megatron_modules: tuple[str, ...] = MEGATRON_IMPORT_ONLY):
    """While active, importing one of ``names`` that is not installed yields a placeholder module.

    ``megatron_modules`` get placeholders too, when ``megatron.core`` is the stand-in (real Megatron: untouched).
    """
    finder = _AbsentFinder(names)
    sys.meta_path.append(finder)
    state = sys.modules.get("megatron.core.parallel_state")
    if state is not None and (state.__doc__ or "").startswith("harness stand-in"):
        for name in megatron_modules:
            if name not in sys.modules:
                sys.modules[name] = AbsentDependency(name)
                finder.created.append(name)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        for name in finder.created:
            if isinstance(sys.modules.get(name), AbsentDependency):
                del sys.modules[name]


# ---- the settings slime reads -------------------------------------------------------------


class SlimeArgs(StrictSettings):
    """slime's ``args``: a missing setting raises an AttributeError naming it (``getattr`` defaults still work)."""

    READ_AS = "slime args"
    MAPPED_IN = "harness/targets/slime/adapter.py (_args)"


# ---- miles' parallel state --------------------------------------------------------------------


@dataclass(frozen=True)
class GroupStandIn:
    """What miles' code reads of a ``GroupInfo``: ``rank``, ``size`` and ``group`` (SINGLE_RANK for one rank)."""

    rank: int
    size: int
    group: object


def _group_info(group) -> GroupStandIn:
    if group is None:
        return GroupStandIn(0, 1, megatron_stand_in.SINGLE_RANK)
    return GroupStandIn(dist.get_rank(group), dist.get_world_size(group), group)


def parallel_state(tp_group, cp_group) -> types.SimpleNamespace:
    """miles' ``ParallelState`` for one job: the TP and CP groups; every other dimension one rank.

    miles' loss code finds its groups through ``get_parallel_state()`` (``.tp``,
    ``.cp``), not Megatron's ``mpu``. Its own ``ParallelState`` and ``GroupInfo``
    check every group against ``torch.distributed`` and hold DP/PP/EP meshes the
    log-prob code never reads, so the adapter sets this namespace instead; a
    dimension it does not provide raises an AttributeError naming it.
    """
    single = _group_info(None)
    return types.SimpleNamespace(
        tp=_group_info(tp_group),
        cp=_group_info(cp_group),
        cp_comm_type=None,
        is_ulysses_cp=False,
        is_pp_last_stage=True,
        pp=single,
        ep=single,
        etp=single,
    )
