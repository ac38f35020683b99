"""Stand-in for TE's ``pytorch/cross_entropy.py``: ``CrossEntropyFunction`` and ``parallel_cross_entropy``."""

import torch

import transformer_engine.pytorch.triton.cross_entropy as triton_cross_entropy
from transformer_engine.pytorch.jit import no_torch_dynamo  # noqa: F401  (the real file imports it)


class CrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp, target, label_smoothing=0.0, reduce_loss=False, dist_process_group=None, ignore_idx=-100,
                overwrite_input=False):  # fmt: skip
        loss, saved, lse, target, _, rank, _ = triton_cross_entropy.cross_entropy_forward(
            inp, target, label_smoothing, reduce_loss, dist_process_group, ignore_idx, overwrite_input
        )
        ctx.save_for_backward(saved.detach(), lse, target)
        ctx.rank = rank
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        saved, lse, target = ctx.saved_tensors
        grad = triton_cross_entropy.cross_entropy_backward(saved, lse, target, grad_output, ctx.rank)
        return grad, None, None, None, None, None, None


def parallel_cross_entropy(inp, target, label_smoothing=0.0, reduce_loss=False, dist_process_group=None,
                           ignore_idx=-100):  # fmt: skip
    if not inp.is_cuda:
        raise ValueError("inp must be a CUDA tensor")
    return CrossEntropyFunction.apply(inp, target, label_smoothing, reduce_loss, dist_process_group, ignore_idx, False)
