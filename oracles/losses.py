"""Float64 losses built from per-sample log-probs and entropy (docs/math.md, "Losses the oracle differentiates").

Every function returns float64 and stays differentiable, so a caller gets the
reference gradient w.r.t. the global logits from float64 autograd.
Convention: a sample with no response, or with every token masked, adds 0 to
``sum_of_sample_mean`` (its denominator is clamped to 1).
"""

from __future__ import annotations

import torch

from . import layout, token


def per_sample(values: torch.Tensor, rows_per_sample) -> list[torch.Tensor]:
    """Pick each sample's rows (e.g. ``layout.response_rows``) out of a per-row quantity ``[rows]``."""
    return [values[torch.tensor(rows, dtype=torch.long)] for rows in rows_per_sample]


def probe_loss(log_probs, entropy, a, b) -> torch.Tensor:
    """``L = sum_i sum_t a_it l_it + sum_i sum_t b_it H_it`` (docs/math.md probe loss; entropy term only when given)."""
    if entropy is not None and b is None:
        raise ValueError("b (the entropy weights) is required when entropy is given")
    loss = torch.zeros((), dtype=torch.float64)
    for lp, weights in zip(log_probs, a, strict=True):
        loss = loss + (weights.double() * lp.double()).sum()
    if entropy is not None:
        for h, weights in zip(entropy, b, strict=True):
            loss = loss + (weights.double() * h.double()).sum()
    return loss


def sum_of_sample_mean(values, masks) -> torch.Tensor:
    """``sum_i (sum_t m_it x_it) / max(sum_t m_it, 1)``: an empty or all-masked sample adds 0."""
    total = torch.zeros((), dtype=torch.float64)
    for x, m in zip(values, masks, strict=True):
        m = m.double()
        total = total + (x.double() * m).sum() / max(float(m.sum()), 1.0)
    return total


def policy_loss(
    log_probs,
    old_log_probs,
    advantages,
    loss_masks,
    entropy,
    *,
    eps_clip: float,
    eps_clip_high: float,
    entropy_coef: float,
) -> torch.Tensor:
    """PPO clipped policy-gradient loss minus ``entropy_coef * sum_of_sample_mean(H, masks)``.

    Per token: ``ratio = exp(l - l_old)``,
    ``pg = max(-A ratio, -A clamp(ratio, 1 - eps_clip, 1 + eps_clip_high))``;
    the loss is ``sum_of_sample_mean(pg, masks)``. The entropy term is omitted
    when ``entropy`` is None.
    """
    pg = []
    for lp, old, adv in zip(log_probs, old_log_probs, advantages, strict=True):
        ratio = torch.exp(lp.double() - old.double())
        adv = adv.double()
        pg.append(torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)))
    loss = sum_of_sample_mean(pg, loss_masks)
    if entropy is not None:
        loss = loss - entropy_coef * sum_of_sample_mean(entropy, loss_masks)
    return loss


def packed_reference(
    logits_global: torch.Tensor,
    tokens,
    total_lengths,
    response_lengths,
    qkv_format: str,
    pad_multiple: int,
    temperature: float = 1.0,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-sample float64 ``(log_probs_i, entropy_i)`` from the full ``[rows, V]`` logits of a layout.

    docs/math.md "Packed batches": rows ``layout.response_rows``, targets
    ``y_i[P_i:T_i]``. Differentiable w.r.t. ``logits_global``; rows outside
    every response get zero gradient.
    """
    rows = layout.response_rows(total_lengths, response_lengths, qkv_format, pad_multiple)
    expected = layout.stream_rows(total_lengths, qkv_format, pad_multiple)
    if logits_global.shape[0] != expected:
        raise ValueError(f"logits_global has {logits_global.shape[0]} rows, the {qkv_format} layout has {expected}")
    targets = layout.response_targets(tokens, response_lengths)
    picked = per_sample(logits_global, rows)
    log_probs = [token.log_probs(z, y, temperature) for z, y in zip(picked, targets)]
    entropy = [token.entropy(z, temperature) for z in picked]
    return log_probs, entropy
