"""The whole vocabulary on every TP rank: the seam for libraries whose log-prob code does not shard it.

TRL's helpers and Liger's token cross entropy take ``[rows, V]`` logits: a
trainer running them under tensor parallelism gathers the vocabulary shards
first (Megatron's ``gather_from_tensor_model_parallel_region``). The harness
hands a target this rank's shard, so such an adapter gathers it the same way:
forward concatenates every rank's ``[rows, V_local]`` in rank order, backward
keeps this rank's columns of the gradient (each rank computes the same whole
gradient, so no reduction is needed). With one rank it is the identity.

What the suite then checks is the library's arithmetic on the whole
vocabulary; memory at TP > 1 is charged the gathered copy (the adapter's, a
trainer's too).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class _GatherVocabulary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, shard, tp_group):
        world, rank = dist.get_world_size(tp_group), dist.get_rank(tp_group)
        ctx.rank, ctx.width = rank, shard.shape[-1]
        pieces = [torch.empty_like(shard) for _ in range(world)]
        dist.all_gather(pieces, shard.contiguous(), group=tp_group)
        return torch.cat(pieces, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        start = ctx.rank * ctx.width
        return grad[..., start : start + ctx.width].contiguous(), None


def gather_vocabulary(logits: torch.Tensor, tp_group) -> torch.Tensor:
    """This rank's ``[rows, V_local]`` shard -> ``[rows, V]`` (rank order), gradient flowing back to the shard."""
    if tp_group is None or dist.get_world_size(tp_group) == 1:
        return logits
    return _GatherVocabulary.apply(logits, tp_group)
