"""Stand-in for Megatron-core's vocab-parallel cross entropy: its imports and signature; like Megatron's, it
subtracts the row max from its input in place (written here)."""

import torch
from megatron.core.parallel_state import get_tensor_model_parallel_group
from megatron.core.utils import get_pg_rank, get_pg_size

from .utils import VocabUtility


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, label_smoothing=0.0, tp_group=None):
        tp_group = get_tensor_model_parallel_group() if tp_group is None else tp_group
        top = logits.max(-1)[0]
        torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX, group=tp_group)
        logits.sub_(top.unsqueeze(-1))
        start, end = VocabUtility.vocab_range_from_per_partition_vocab_size(
            logits.shape[-1], get_pg_rank(tp_group), get_pg_size(tp_group)
        )
        outside = (target < start) | (target >= end)
        local = (target - start).masked_fill(outside, 0)
        picked = logits.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        exp = logits.exp()
        total = exp.sum(-1)
        torch.distributed.all_reduce(picked, group=tp_group)
        torch.distributed.all_reduce(total, group=tp_group)
        softmax = exp / total.unsqueeze(-1)
        ctx.save_for_backward(softmax, outside, local)
        return total.log() - picked

    @staticmethod
    def backward(ctx, grad_output):
        softmax, outside, local = ctx.saved_tensors
        onehot = torch.zeros_like(softmax).scatter_(-1, local.unsqueeze(-1), 1.0) * (~outside).unsqueeze(-1)
        return (softmax - onehot) * grad_output.unsqueeze(-1), None, None, None


def vocab_parallel_cross_entropy(vocab_parallel_logits, target, label_smoothing=0.0, tp_group=None):
    return _VocabParallelCrossEntropy.apply(vocab_parallel_logits, target, label_smoothing, tp_group)
