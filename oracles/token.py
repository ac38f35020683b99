"""Float64 per-token references (docs/math.md, "Per-token quantities").

Dumb on purpose: one short function per quantity, float64, full vocabulary,
differentiable by float64 autograd. ``naive_*`` are the plain same-dtype
torch computations the tolerance policy measures the target against (a
target's error may be at most k times the naive one's, FlashAttention-style).

Conventions:
- ``-inf`` logits (masked vocabulary entries) have ``p = 0``; their entropy
  term is 0, never NaN, in values and in gradients, and their gradient is 0.
- A row that is entirely ``-inf`` has no distribution: undefined here (NaN);
  the harness never generates one.
- A target whose logit is ``-inf`` gives ``l = -inf``; the harness never draws
  such a target.
"""

from __future__ import annotations

import torch


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``z = logits / temperature`` in float64 (docs/math.md: ``z <- z / tau``)."""
    return logits.double() / temperature


def log_sum_exp(z: torch.Tensor) -> torch.Tensor:
    """``lse(z) = m + log sum_v exp(z_v - m)`` per row, ``m`` the row max.

    ``m`` is detached: the expression does not depend on it, so neither does its
    gradient. ``-inf`` columns read ``exp(-inf) = 0`` and get gradient 0.
    """
    m = z.max(dim=-1, keepdim=True).values.detach()
    return (m + (z - m).exp().sum(dim=-1, keepdim=True).log()).squeeze(-1)


def log_probs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``l = z_t - lse(z)`` with ``z = logits / temperature``; float64 ``[N]`` from ``[N, V]``."""
    z = _scaled(logits, temperature)
    return z.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1) - log_sum_exp(z)


def entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``H = -sum_v p_v log p_v`` with the ``p_v = 0`` (``z_v = -inf``) terms taken as 0.

    The where-gradient trap: ``where(mask, f(x), 0)`` still back-propagates
    ``0 * f'(x)`` through the discarded branch, which is NaN if ``f'(x)`` is
    inf. So the masked entries are replaced by 0 BEFORE ``exp`` and the
    product, and the only op that sees ``-inf`` is the linear ``z - lse``.
    """
    z = _scaled(logits, temperature)
    finite = torch.isfinite(z)
    log_p = torch.where(finite, z - log_sum_exp(z).unsqueeze(-1), torch.zeros_like(z))
    p = torch.where(finite, log_p.exp(), torch.zeros_like(z))
    return -(p * log_p).sum(dim=-1)


def naive_log_probs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Plain ``log_softmax`` + gather in the INPUT dtype (no upcast): the tolerance yardstick."""
    z = logits / temperature
    return torch.log_softmax(z, dim=-1).gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def naive_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Plain ``-(softmax * log_softmax).sum()`` in the INPUT dtype, ``p = 0`` terms as 0 (no NaN)."""
    z = logits / temperature
    log_p = torch.log_softmax(z, dim=-1)
    p = log_p.exp()
    return -torch.where(p > 0, p * log_p.masked_fill(p == 0, 0), torch.zeros_like(p)).sum(dim=-1)
