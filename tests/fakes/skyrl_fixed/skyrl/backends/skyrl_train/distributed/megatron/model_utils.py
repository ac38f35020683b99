"""Stand-in for SkyRL's Megatron model utilities, written here: the upstream SIGNATURES only.

``harness/targets/skyrl/family.py`` loads this file by path exactly as it loads the
real one, so the adapter's seams (finding the file, the Megatron stand-in,
shapes ``[B, S, V_local]``, shard bounds, chunked vs whole) are tested with no
network and no upstream checkout. The arithmetic is plain torch autograd:
correct by construction, so the harness must pass it. ``skyrl_buggy`` holds
the two historic bugs and has no packed entry point.
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


class FusedLinearChunkedDistributedLogprob:
    """SkyRL 0.3.0's fused LM-head signature; plain autograd per chunk of rows.

    As upstream, ``grad(hidden)`` is this rank's partial ``g_r @ W_r`` (the
    trainer's sequence-parallel gather sums it over TP, not this Function).
    """

    @staticmethod
    def apply(hidden, weight, target, vocab_start_index, vocab_end_index, chunk_size, tp_group, inference_only=False):
        pieces = []
        for start in range(0, hidden.shape[1], chunk_size):
            logits = hidden[:, start : start + chunk_size].to(weight.dtype) @ weight.t()
            log_p = _global_log_softmax(logits, tp_group)
            pieces.append(
                _chosen(log_p, target[:, start : start + chunk_size], vocab_start_index, vocab_end_index, tp_group)
            )
        return torch.cat(pieces, dim=1)


def vocab_parallel_entropy(vocab_parallel_logits):
    """``-sum p log p`` with the term of a ``-inf`` logit (``p = 0``) taken as 0 (docs/math.md), value and gradient.

    ``log p`` is replaced by 0 where it is ``-inf`` BEFORE the product, so
    neither ``0 * -inf`` in the forward nor ``0 * inf`` in the backward can
    make a NaN (SkyRL 0.3.0's ``_VocabParallelEntropy`` does both).
    """
    log_p = _global_log_softmax(vocab_parallel_logits, mpu.get_tensor_model_parallel_group())
    finite_log_p = torch.where(torch.isneginf(log_p), torch.zeros_like(log_p), log_p)
    return -_SumOfShards.apply((log_p.exp() * finite_log_p).sum(-1), mpu.get_tensor_model_parallel_group())


def _my_chunks(values, cp_rank, cp_size):
    """This CP rank's two load-balanced chunks (``r`` and ``2cp-1-r``) of one padded sequence."""
    if cp_size == 1:
        return values
    chunks = values.chunk(2 * cp_size)
    return torch.cat([chunks[cp_rank], chunks[2 * cp_size - 1 - cp_rank]])


class AllGatherPackedCPTensor(torch.autograd.Function):
    """Per-token values of every CP rank back in packed-sequence order; backward keeps this rank's own tokens."""

    @staticmethod
    def forward(ctx, tensor, cu_seqlens_padded, cp_group):
        cp_size, cp_rank = dist.get_world_size(cp_group), dist.get_rank(cp_group)
        parts = [torch.empty_like(tensor) for _ in range(cp_size)]
        dist.all_gather(parts, tensor.contiguous(), group=cp_group)
        bounds = [int(v) for v in cu_seqlens_padded.tolist()]
        out = []
        for i in range(len(bounds) - 1):
            pieces = [part[bounds[i] // cp_size : bounds[i + 1] // cp_size].chunk(2) for part in parts]
            order = [None] * (2 * cp_size)
            for rank, (first, second) in enumerate(pieces):
                order[rank], order[2 * cp_size - 1 - rank] = first, second
            out.extend(order)
        ctx.bounds, ctx.cp_size, ctx.cp_rank = bounds, cp_size, cp_rank
        return torch.cat(out)

    @staticmethod
    def backward(ctx, grad_output):
        b = ctx.bounds
        mine = [_my_chunks(grad_output[b[i] : b[i + 1]], ctx.cp_rank, ctx.cp_size) for i in range(len(b) - 1)]
        return torch.cat(mine), None, None


def from_parallel_logits_to_logprobs_packed_sequences(
    vocab_parallel_logits,
    target,
    cu_seqlens_padded,
    unpacked_seqlen,
    vocab_start_index,
    vocab_end_index,
    group,
    inference_only=False,
    cp_group=None,
    chunk_size=None,
    attention_mask=None,
    sub_seq_lengths=None,
):
    cp_size = 1 if cp_group is None else dist.get_world_size(cp_group)
    cp_rank = 0 if cp_group is None else dist.get_rank(cp_group)
    bounds = [int(v) for v in cu_seqlens_padded.tolist()]
    flat = target.squeeze(0)
    rolled = [_my_chunks(flat[bounds[i] : bounds[i + 1]].roll(-1), cp_rank, cp_size) for i in range(len(bounds) - 1)]
    rolled = torch.cat(rolled).unsqueeze(0)
    if chunk_size is not None and chunk_size < vocab_parallel_logits.shape[1]:
        probs = ChunkedDistributedLogprob.apply(
            vocab_parallel_logits, rolled, vocab_start_index, vocab_end_index, chunk_size, group
        )
    else:
        probs = DistributedLogprob.apply(vocab_parallel_logits, rolled, vocab_start_index, vocab_end_index, group)
    probs = probs.squeeze(0)
    if cp_size > 1:
        probs = AllGatherPackedCPTensor.apply(probs, cu_seqlens_padded, cp_group)
    out = probs.new_zeros(len(bounds) - 1, unpacked_seqlen - 1)
    for i in range(len(bounds) - 1):
        keep = min(bounds[i + 1] - bounds[i] - 1, unpacked_seqlen - 1)
        if keep > 0:
            out[i, :keep] = probs[bounds[i] : bounds[i] + keep]
    return out
