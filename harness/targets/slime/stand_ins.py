"""Stand-ins for what slime's log-prob modules import besides ``megatron.core.mpu`` (see slime.py).

Written here from the upstream SIGNATURES and documented behaviour only; no
upstream code is copied.

* ``megatron.core.fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy``:
  the vocab-parallel cross-entropy that slime's older ``compute_log_probs``
  wraps. Like Megatron's, it takes ``[S, B, V_local]`` logits (cast to fp32)
  and ``[S, B]`` global target ids, returns the per-token loss ``lse - z_t``,
  and OVERWRITES its fp32 input with the softmax (the in-place behaviour that
  made slime clone the logits before calling it). Its gradient is
  ``(softmax - onehot) * grad``.
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

import torch
import torch.distributed as dist

from harness.targets.upstream import megatron_stand_in
from harness.targets.upstream.settings import StrictSettings

# ---- megatron.core.fusions.fused_cross_entropy -------------------------------------------


def _group_rank(group) -> int:
    if group is None or isinstance(group, megatron_stand_in._SingleRank):
        return 0
    return dist.get_rank(group)


def _all_reduce(tensor: torch.Tensor, group, op=dist.ReduceOp.SUM) -> None:
    if group is None or isinstance(group, megatron_stand_in._SingleRank):
        return
    dist.all_reduce(tensor, op=op, group=group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token ``lse - z_t`` over a TP-sharded vocabulary; the fp32 input is overwritten with the softmax."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, group):
        vocab_local = logits.shape[-1]
        start = _group_rank(group) * vocab_local
        flat = logits.view(-1, vocab_local)
        flat_target = target.reshape(-1)
        outside = (flat_target < start) | (flat_target >= start + vocab_local)
        local_target = (flat_target - start).masked_fill(outside, 0)

        row_max = flat.max(dim=-1).values
        _all_reduce(row_max, group, dist.ReduceOp.MAX)
        flat.sub_(row_max.unsqueeze(-1))
        predicted = flat.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        _all_reduce(predicted, group)
        flat.exp_()
        sum_exp = flat.sum(dim=-1)
        _all_reduce(sum_exp, group)
        loss = sum_exp.log() - predicted
        flat.div_(sum_exp.unsqueeze(-1))
        # The input itself now holds the softmax; like Megatron, save it (not a view made here) for backward.
        ctx.save_for_backward(logits, outside, local_target)
        return loss.view(target.shape)

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        softmax, outside, local_target = ctx.saved_tensors
        grad = softmax.reshape(-1, softmax.shape[-1]).clone()
        rows = torch.arange(grad.shape[0], device=grad.device)
        grad[rows, local_target] -= (~outside).to(grad.dtype)
        grad.mul_(grad_loss.reshape(-1, 1))
        return grad.view(softmax.shape), None, None


def fused_vocab_parallel_cross_entropy(vocab_parallel_logits, target, tp_group=None):
    """Megatron's signature: ``[S, B, V_local]`` logits, ``[S, B]`` targets, TP group (default: mpu's)."""
    if tp_group is None:
        tp_group = sys.modules["megatron.core.parallel_state"].get_tensor_model_parallel_group()
    return _VocabParallelCrossEntropy.apply(vocab_parallel_logits.float(), target, tp_group)


def install_megatron_fusions() -> None:
    """Register ``megatron.core.fusions.fused_cross_entropy`` next to the mpu stand-in (real Megatron: untouched)."""
    state = megatron_stand_in.install()
    if not (state.__doc__ or "").startswith("harness stand-in"):
        return
    if "megatron.core.fusions.fused_cross_entropy" in sys.modules:
        return
    fusions = types.ModuleType("megatron.core.fusions")
    fused = types.ModuleType("megatron.core.fusions.fused_cross_entropy")
    fused.__doc__ = "harness stand-in (harness/targets/slime/stand_ins.py)"
    fused.fused_vocab_parallel_cross_entropy = fused_vocab_parallel_cross_entropy
    fusions.fused_cross_entropy = fused
    sys.modules["megatron.core"].fusions = fusions
    sys.modules["megatron.core.fusions"] = fusions
    sys.modules["megatron.core.fusions.fused_cross_entropy"] = fused


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
