"""Identity on values every rank of a group holds alike; backward: the gradient summed over the group.

The seam an adapter needs where the protocol hands each rank the same values
but the upstream code (or the harness's view of its output) gives each rank
only its own part of the gradient: SkyRL's sequence-parallel gather of the
hidden states over TP (its backward reduce-scatters, the TP sum), and verl's
CP gather of the packed outputs, whose identical loss on every rank the
harness splits into per-rank views.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class SumGradientOverGroup(torch.autograd.Function):
    """``SumGradientOverGroup.apply(values, group)``: ``values`` forward, the group's summed gradient backward."""

    @staticmethod
    def forward(ctx, values, group):
        ctx.group = group
        return values.view_as(values)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None
