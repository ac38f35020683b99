"""Float64 losses built from per-sample log-probs and entropy (MATH.md, "Losses the oracle differentiates")."""

from __future__ import annotations

import torch


def per_sample(values: torch.Tensor, rows_per_sample) -> list[torch.Tensor]:
    """Pick each sample's rows out of a per-row quantity."""
    return [values[torch.tensor(rows, dtype=torch.long)] for rows in rows_per_sample]


def probe_loss(log_probs, entropy, a, b) -> torch.Tensor:
    """``L = sum_i sum_t a_it l_it + sum_i sum_t b_it H_it`` (the entropy term only when given)."""
    loss = torch.zeros((), dtype=torch.float64)
    for lp, weights in zip(log_probs, a):
        loss = loss + (weights.double() * lp.double()).sum()
    if entropy is not None:
        for h, weights in zip(entropy, b):
            loss = loss + (weights.double() * h.double()).sum()
    return loss


def sum_of_sample_mean(values, masks) -> torch.Tensor:
    """``sum_i (sum_t m_it x_it) / max(sum_t m_it, 1)``: an empty or all-masked sample adds 0."""
    total = torch.zeros((), dtype=torch.float64)
    for x, m in zip(values, masks):
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
    """PPO clipped policy-gradient loss (``sum_of_sample_mean``) minus ``entropy_coef`` times mean entropy."""
    pg = []
    for lp, old, adv in zip(log_probs, old_log_probs, advantages):
        ratio = torch.exp(lp.double() - old.double())
        adv = adv.double()
        pg.append(torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)))
    loss = sum_of_sample_mean(pg, loss_masks)
    if entropy is not None:
        loss = loss - entropy_coef * sum_of_sample_mean(entropy, loss_masks)
    return loss
