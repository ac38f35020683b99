"""Stand-ins for Megatron's vocab-parallel cross entropy, which upstream log-prob code calls.

Written here from Megatron's SIGNATURES and documented behaviour only; no
Megatron code is copied. Like Megatron's, the Function takes ``[..., V_local]``
logits (cast to fp32) and global target ids, returns the per-token loss
``lse - z_t``, and OVERWRITES its fp32 input with the softmax (the in-place
behaviour that made slime clone the logits and verl back them up before
calling it). Its gradient is ``(softmax - onehot) * grad``, computed on a copy
of the saved softmax: a defect of Megatron's own backward is out of reach of
checks that run on this stand-in, which is said wherever it is used.

Two Megatron names are provided, beside the ``mpu`` stand-in:

* ``megatron.core.fusions.fused_cross_entropy.fused_vocab_parallel_cross_entropy``
  (slime's older ``compute_log_probs``, miles' ``compute_log_probs``);
* ``megatron.core.tensor_parallel.vocab_parallel_cross_entropy`` (verl's
  ``vocab_parallel_log_probs_from_logits``).
"""

from __future__ import annotations

import sys
import types

import torch
import torch.distributed as dist

from harness.targets.upstream import megatron_stand_in

STAND_IN_DOC = "harness stand-in (harness/targets/upstream/megatron_cross_entropy.py)"


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


def vocab_parallel_cross_entropy(vocab_parallel_logits, target, label_smoothing=0.0):
    """``megatron.core.tensor_parallel.vocab_parallel_cross_entropy``: the TP group is mpu's; no label smoothing."""
    if label_smoothing:
        raise NotImplementedError("the Megatron stand-in has no label smoothing (no upstream log-prob path uses it)")
    tp_group = sys.modules["megatron.core.parallel_state"].get_tensor_model_parallel_group()
    return _VocabParallelCrossEntropy.apply(vocab_parallel_logits.float(), target, tp_group)


def _register(name: str, **attributes) -> None:
    """Register ``megatron.core.<name>`` (and its parents) holding ``attributes``, unless already present."""
    if f"megatron.core.{name}" in sys.modules:
        return
    parent = sys.modules["megatron.core"]
    full = "megatron.core"
    for part in name.split("."):
        full = f"{full}.{part}"
        module = sys.modules.get(full)
        if module is None:
            module = types.ModuleType(full)
            module.__doc__ = STAND_IN_DOC
            sys.modules[full] = module
            setattr(parent, part, module)
        parent = module
    for key, value in attributes.items():
        setattr(parent, key, value)


def install() -> None:
    """Register both cross-entropy names next to the mpu stand-in (real Megatron: untouched)."""
    state = megatron_stand_in.install()
    if not (state.__doc__ or "").startswith("harness stand-in"):
        return
    _register("fusions.fused_cross_entropy", fused_vocab_parallel_cross_entropy=fused_vocab_parallel_cross_entropy)
    _register("tensor_parallel", vocab_parallel_cross_entropy=vocab_parallel_cross_entropy)
