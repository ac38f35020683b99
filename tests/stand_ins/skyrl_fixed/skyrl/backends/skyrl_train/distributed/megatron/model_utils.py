"""Stand-in for SkyRL's Megatron model utilities, written here: the upstream SIGNATURES only.

``harness/targets/skyrl.py`` loads this file by path exactly as it loads the
real one, so the adapter's seams (finding the file, the Megatron stand-in,
shapes ``[B, S, V_local]``, shard bounds, chunked vs whole) are tested with no
network and no upstream checkout. The arithmetic is plain torch autograd:
correct by construction, so the harness must pass it. ``skyrl_buggy`` holds
the two historic bugs.
"""

import megatron.core.parallel_state as mpu
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn


class _SumOfShards(torch.autograd.Function):
    """A sum over shards of a value every rank then holds: each rank's gradient is its own (Megatron's reduce)."""

    @staticmethod
    def forward(ctx, partial, group):
        total = partial.clone()
        dist.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _global_log_softmax(logits, group):
    """log p over the full vocabulary from this rank's shard; the sum of exponentials is differentiable.

    Its all-reduce's backward sums every rank's gradient with respect to the
    shared normaliser, which each rank's own columns then receive.
    """
    logits = logits.float()
    row_max = logits.detach().amax(-1, keepdim=True)
    dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
    shifted = logits - row_max
    sum_exp = dist_nn.all_reduce(shifted.exp().sum(-1, keepdim=True), group=group)
    return shifted - sum_exp.log()


def _chosen(log_p, target, vocab_start_index, vocab_end_index, group):
    outside = (target < vocab_start_index) | (target >= vocab_end_index)
    local = (target - vocab_start_index).clamp(0, log_p.shape[-1] - 1)
    picked = log_p.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
    return _SumOfShards.apply(picked, group)


class DistributedLogprob:
    @staticmethod
    def apply(vocab_parallel_logits, target, vocab_start_index, vocab_end_index, group, inference_only=False):
        log_p = _global_log_softmax(vocab_parallel_logits, group)
        return _chosen(log_p, target, vocab_start_index, vocab_end_index, group)


class ChunkedDistributedLogprob:
    @staticmethod
    def apply(
        vocab_parallel_logits, target, vocab_start_index, vocab_end_index, chunk_size, tp_group, inference_only=False
    ):
        pieces = []
        for start in range(0, vocab_parallel_logits.shape[1], chunk_size):
            chunk = vocab_parallel_logits[:, start : start + chunk_size]
            log_p = _global_log_softmax(chunk, tp_group)
            pieces.append(
                _chosen(log_p, target[:, start : start + chunk_size], vocab_start_index, vocab_end_index, tp_group)
            )
        return torch.cat(pieces, dim=1)


def vocab_parallel_entropy(vocab_parallel_logits):
    log_p = _global_log_softmax(vocab_parallel_logits, mpu.get_tensor_model_parallel_group())
    return -_SumOfShards.apply((log_p.exp() * log_p).sum(-1), mpu.get_tensor_model_parallel_group())
