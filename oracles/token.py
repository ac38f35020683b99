"""Float64 per-token references (MATH.md, "Per-token quantities").

Dumb on purpose: one short function per quantity, float64, full vocabulary,
differentiable by float64 autograd. ``naive_*`` are the plain same-dtype
torch computations the tolerance policy measures the target against.
Rows that are entirely ``-inf`` are undefined (no distribution); the harness
never generates them.
"""

from __future__ import annotations

import torch


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return logits.double() / temperature


def log_sum_exp(z: torch.Tensor) -> torch.Tensor:
    """``m + log sum exp(z - m)`` per row, ``m`` the row max."""
    m = z.max(dim=-1, keepdim=True).values.detach()
    return (m + (z - m).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)


def log_probs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``l = z_t - lse(z)`` with ``z = logits / temperature``."""
    z = _scaled(logits, temperature)
    return z.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1) - log_sum_exp(z)


def entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``H = -sum p log p`` with the ``p = 0`` (``z = -inf``) terms taken as 0, in values and gradients."""
    z = _scaled(logits, temperature)
    finite = torch.isfinite(z)
    # Masked entries read log p = 0 in BOTH branches' inputs, so no discarded
    # branch ever holds inf (the where-gradient trap: 0 * inf = NaN).
    log_p = torch.where(finite, z - log_sum_exp(z).unsqueeze(-1), torch.zeros_like(z))
    p = torch.where(finite, log_p.exp(), torch.zeros_like(z))
    return -(p * log_p).sum(dim=-1)


def naive_log_probs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Plain ``log_softmax`` + gather in the input dtype (no upcast)."""
    z = logits / temperature
    return torch.log_softmax(z, dim=-1).gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def naive_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Plain ``-(softmax * log_softmax).sum()`` in the input dtype, ``p = 0`` terms as 0."""
    z = logits / temperature
    log_p = torch.log_softmax(z, dim=-1)
    p = log_p.exp()
    return -torch.where(p > 0, p * log_p.masked_fill(p == 0, 0), torch.zeros_like(p)).sum(dim=-1)
