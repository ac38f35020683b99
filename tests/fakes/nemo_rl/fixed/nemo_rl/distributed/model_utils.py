"""Stand-in for ``nemo_rl/distributed/model_utils.py``: NeMo-RL's signatures, plain correct arithmetic.

Written for the harness's seam tests from the upstream SIGNATURES and documented
behaviour (entropy returned as ``sum p log p``, targets rolled per sequence by the
packed entry point, CP all-gather of per-sequence load-balanced shards); no
upstream code is copied. Unlike the HEAD revision it builds no one_hot in the
chunked backward, and its CP all-gather backward runs on any device.
"""

import torch
import torch.distributed


def _log_softmax(logits: torch.Tensor, group) -> torch.Tensor:
    """Full-vocabulary log-softmax of this rank's fp32 shard (no graph)."""
    with torch.no_grad():
        top = logits.amax(dim=-1, keepdim=True)
        torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX, group=group)
        shifted = logits - top
        total = shifted.exp().sum(-1, keepdim=True)
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=group)
        return shifted - total.log()


def _local_targets(target, start, end):
    outside = (target < start) | (target >= end)
    return (target - start).masked_fill(outside, 0), outside


def _chosen(log_probs, local, outside, group):
    picked = log_probs.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
    torch.distributed.all_reduce(picked, op=torch.distributed.ReduceOp.SUM, group=group)
    return picked


def _grad(log_probs, local, outside, grad_output):
    """``(onehot - p) * g`` without a one_hot: ``-p * g``, then ``+g`` scattered at the chosen column."""
    grad = log_probs.exp().neg_().mul_(grad_output.unsqueeze(-1))
    grad.scatter_add_(-1, local.unsqueeze(-1), (grad_output * (~outside)).unsqueeze(-1))
    return grad


class DistributedLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, vocab_parallel_logits, target, vocab_start_index, vocab_end_index, group, inference_only=False):
        local, outside = _local_targets(target, vocab_start_index, vocab_end_index)
        log_probs = _log_softmax(vocab_parallel_logits.float(), group)
        if not inference_only:
            ctx.save_for_backward(log_probs, local, outside)
        return _chosen(log_probs, local, outside, group)

    @staticmethod
    def backward(ctx, grad_output):
        log_probs, local, outside = ctx.saved_tensors
        return _grad(log_probs, local, outside, grad_output), None, None, None, None, None


class ChunkedDistributedLogprob(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        vocab_parallel_logits,
        target,
        vocab_start_index,
        vocab_end_index,
        chunk_size,
        tp_group,
        inference_only=False,
    ):
        local, outside = _local_targets(target, vocab_start_index, vocab_end_index)
        pieces = []
        for s in range(0, vocab_parallel_logits.shape[1], chunk_size):
            log_probs = _log_softmax(vocab_parallel_logits[:, s : s + chunk_size].float(), tp_group)
            pieces.append(_chosen(log_probs, local[:, s : s + chunk_size], outside[:, s : s + chunk_size], tp_group))
        if not inference_only:
            ctx.save_for_backward(vocab_parallel_logits, local, outside)
            ctx.chunk_size, ctx.tp_group = chunk_size, tp_group
        return torch.cat(pieces, dim=1)

    @staticmethod
    def chunk_grad(logits, local, outside, grad_output, group):
        return _grad(_log_softmax(logits.float(), group), local, outside, grad_output)

    @staticmethod
    def backward(ctx, grad_output):
        logits, local, outside = ctx.saved_tensors
        grad = torch.zeros_like(logits, dtype=torch.float32)
        step = ctx.chunk_size
        for s in range(0, logits.shape[1], step):
            part = slice(s, s + step)
            grad[:, part] = ChunkedDistributedLogprob.chunk_grad(
                logits[:, part], local[:, part], outside[:, part], grad_output[:, part], ctx.tp_group
            )
        return grad, None, None, None, None, None, None


class ChunkedDistributedEntropy(torch.autograd.Function):
    """Returns ``sum_v p_v log p_v`` (NeMo's sign: the negative of the entropy)."""

    @staticmethod
    def forward(ctx, vocab_parallel_logits, chunk_size, tp_group, inference_only=False):
        pieces = []
        for s in range(0, vocab_parallel_logits.shape[1], chunk_size):
            log_probs = _log_softmax(vocab_parallel_logits[:, s : s + chunk_size].float(), tp_group)
            part = (log_probs.exp() * log_probs).sum(-1)
            torch.distributed.all_reduce(part, op=torch.distributed.ReduceOp.SUM, group=tp_group)
            pieces.append(part)
        if not inference_only:
            ctx.save_for_backward(vocab_parallel_logits)
            ctx.chunk_size, ctx.tp_group = chunk_size, tp_group
        return torch.cat(pieces, dim=1)

    @staticmethod
    def backward(ctx, grad_output):
        (logits,) = ctx.saved_tensors
        grad = torch.empty_like(logits, dtype=torch.float32)
        for s in range(0, logits.shape[1], ctx.chunk_size):
            part = slice(s, s + ctx.chunk_size)
            log_probs = _log_softmax(logits[:, part].float(), ctx.tp_group)
            p = log_probs.exp()
            value = (p * log_probs).sum(-1, keepdim=True)
            torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.SUM, group=ctx.tp_group)
            grad[:, part] = p * (log_probs - value) * grad_output[:, part].unsqueeze(-1)
        return grad, None, None, None


def _get_tokens_on_this_cp_rank(input_ids, cp_rank, cp_size, seq_dim=1):
    if cp_size == 1:
        return input_ids
    chunks = input_ids.chunk(2 * cp_size, dim=seq_dim)
    return torch.cat([chunks[cp_rank], chunks[2 * cp_size - 1 - cp_rank]], dim=seq_dim)


class AllGatherCPTensor(torch.autograd.Function):
    """Every CP rank's two load-balanced chunks, gathered back into sequence order."""

    @staticmethod
    def forward(ctx, tensor, cp_group, seq_dim=1):
        cp_size = torch.distributed.get_world_size(cp_group)
        parts = [torch.empty_like(tensor) for _ in range(cp_size)]
        torch.distributed.all_gather(parts, tensor.contiguous(), group=cp_group)
        ordered = [None] * (2 * cp_size)
        for rank, part in enumerate(parts):
            first, second = part.chunk(2, dim=seq_dim)
            ordered[rank], ordered[2 * cp_size - 1 - rank] = first, second
        ctx.cp_group, ctx.seq_dim = cp_group, seq_dim
        return torch.cat(ordered, dim=seq_dim)

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.contiguous().clone()
        torch.distributed.all_reduce(grad, group=ctx.cp_group)
        cp_size = torch.distributed.get_world_size(ctx.cp_group)
        rank = torch.distributed.get_rank(ctx.cp_group)
        return _get_tokens_on_this_cp_rank(grad, rank, cp_size, ctx.seq_dim), None, None


def from_parallel_logits_to_logprobs_packed_sequences(
    vocab_parallel_logits: torch.Tensor,
    target: torch.Tensor,
    cu_seqlens_padded: torch.Tensor,
    unpacked_seqlen: int,
    vocab_start_index: int,
    vocab_end_index: int,
    group,
    inference_only: bool = False,
    cp_group: object | None = None,
    chunk_size: int | None = None,
    sampling_params=None,
    target_is_pre_rolled: bool = False,
) -> torch.Tensor:
    batch = cu_seqlens_padded.shape[0] - 1
    cp_size = 1 if cp_group is None else torch.distributed.get_world_size(cp_group)
    cp_rank = 0 if cp_group is None else torch.distributed.get_rank(cp_group)
    bounds = [int(v) for v in cu_seqlens_padded.tolist()]
    flat = target.squeeze(0)
    rolled = torch.cat(
        [
            _get_tokens_on_this_cp_rank(flat[bounds[i] : bounds[i + 1]].roll(-1, 0), cp_rank, cp_size, seq_dim=0)
            for i in range(batch)
        ]
    ).unsqueeze(0)
    if chunk_size is None:
        probs = DistributedLogprob.apply(
            vocab_parallel_logits, rolled, vocab_start_index, vocab_end_index, group, inference_only
        )
    else:
        probs = ChunkedDistributedLogprob.apply(
            vocab_parallel_logits, rolled, vocab_start_index, vocab_end_index, chunk_size, group, inference_only
        )
    probs = probs.squeeze(0)
    pieces = []
    for i in range(batch):
        local = probs[bounds[i] // cp_size : bounds[i + 1] // cp_size]
        pieces.append(local if cp_size == 1 else AllGatherCPTensor.apply(local, cp_group, 0))
    out = probs.new_zeros(batch, unpacked_seqlen - 1)
    for i, piece in enumerate(pieces):
        keep = min(piece.shape[0] - 1, unpacked_seqlen - 1)
        if keep > 0:
            out[i, :keep] = piece[:keep]
    return out
