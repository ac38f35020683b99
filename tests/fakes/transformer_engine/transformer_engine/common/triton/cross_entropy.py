"""Stand-in for TE's Triton kernels file: the per-row statistics its launchers combine (torch, written here)."""

import torch


def row_statistics(x, target, vocab_start):
    """(max, sum exp(x - max), target logit or 0 when another rank owns it) per row of one vocabulary shard."""
    top = x.amax(-1)
    local = target - vocab_start
    owned = (local >= 0) & (local < x.shape[-1])
    picked = x.gather(-1, local.clamp(0, x.shape[-1] - 1).unsqueeze(-1)).squeeze(-1) * owned
    return torch.stack([top, (x - top.unsqueeze(-1)).exp().sum(-1), picked, owned.float()], -1)
