"""Tiny rank jobs used only by the harness's own tests of the pool and the trace.

They live in an importable module because spawned ranks import jobs by name.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn


def whoami(payload, ctx) -> dict:
    value = torch.tensor([float(ctx.rank)])
    dist.all_reduce(value, group=ctx.tp_group)
    return {
        "rank": ctx.rank,
        "tp_rank": ctx.tp_rank,
        "cp_rank": ctx.cp_rank,
        "tp_sum": float(value),
        "payload": payload,
    }


def raise_on(payload, ctx):
    if ctx.rank == payload["rank"]:
        raise ValueError(f"planted failure on rank {ctx.rank}")
    return ctx.rank


def skip_collective(payload, ctx):
    """Rank ``payload['rank']`` returns early; the others wait in an all_reduce it never joins."""
    if ctx.rank == payload["rank"]:
        return "skipped"
    dist.all_reduce(torch.ones(3), group=None)
    return "done"


def cross_wait(payload, ctx):
    """Rank 0 waits in an all_reduce on the world group, rank 1 in one on the TP subgroup: no rank finishes.

    Both groups hold ranks (0, 1) but are distinct process groups, so neither
    call pairs with the other and both ranks time out: the timeout path, which
    no finished peer can short-cut (harness/ranks/deadlock.py).
    """
    dist.all_reduce(torch.ones(3), group=None if ctx.rank == 0 else ctx.tp_group)
    return "done"


def finish_then_peer_computes(payload, ctx):
    """Both ranks join one all_reduce; rank 0 then computes past the hang proof's hold time before it returns.

    A finished peer and a rank whose last collective is on their group, but
    no longer inside it: nothing is proven, the job must finish normally.
    """
    dist.all_reduce(torch.ones(3), group=None)
    if ctx.rank == 0:
        time.sleep(payload["seconds"])
    return ctx.rank


def untraced_peer_then_compute(payload, ctx):
    """Rank 1 joins rank 0's all_reduce through an untraced name, then returns; rank 0 computes afterwards.

    Rank 1's reply counts no collective on the group, rank 0's last one is
    #1 there: only "rank 0 is no longer inside it" keeps the parent from a
    false hang (harness/ranks/deadlock.py).
    """
    if ctx.rank == 1:
        dist.distributed_c10d.all_reduce(torch.ones(3), group=None)  # not the traced ``dist.all_reduce``
        return ctx.rank
    dist.all_reduce(torch.ones(3), group=None)
    time.sleep(payload["seconds"])
    return ctx.rank


def die_on(payload, ctx):
    if ctx.rank == payload["rank"]:
        os._exit(3)
    return ctx.rank


def forward_and_backward_collectives(payload, ctx) -> list:
    """A plain all_reduce in forward, and a differentiable one whose backward all-reduces."""
    dist.all_reduce(torch.ones(4, 3), op=dist.ReduceOp.MAX, group=ctx.tp_group)
    x = torch.ones(5, requires_grad=True)
    dist_nn.all_reduce(x * 2, group=ctx.tp_group).sum().backward()
    return list(ctx.tracer.records)


def backward_collective_on_rank0(payload, ctx) -> list:
    """A throwaway mutant of the hang class: only rank 0 issues a collective, in backward."""
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    if ctx.rank == 0:
        y = dist_nn.all_reduce(y, group=ctx.tp_group)
    y.sum().backward()
    return list(ctx.tracer.records)


def raise_while_peer_waits(payload, ctx):
    """Rank ``payload['rank']`` raises; the others wait in a broadcast it never joins."""
    if ctx.rank == payload["rank"]:
        raise ValueError(f"planted failure on rank {ctx.rank}")
    dist.broadcast(torch.ones(2), src=0, group=None)
    return ctx.rank


def assorted_collectives(payload, ctx) -> list:
    """A tensorless world barrier, an all-gather into one tensor, and nn.all_gather, whose gloo backward scatters.

    The tracer is installed a second time first: installing must be idempotent
    (one record per call, never two).
    """
    ctx.tracer.install()
    dist.barrier()
    dist.all_gather_into_tensor(torch.empty(2 * ctx.tp, 2), torch.ones(2, 2), group=ctx.tp_group)
    x = torch.ones(3, requires_grad=True)
    torch.stack(dist_nn.all_gather(x, group=ctx.tp_group)).sum().backward()
    return list(ctx.tracer.records)
