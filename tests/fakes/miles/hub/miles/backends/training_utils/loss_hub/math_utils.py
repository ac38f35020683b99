"""Stand-in (tests only): miles' token-level API, a plain single-TP-rank torch implementation."""

from contextlib import nullcontext

import torch
from miles.backends.training_utils.cp_utils import get_sum_of_sample_mean  # noqa: F401  (miles imports it here)


def compute_policy_loss(ppo_kl, advantages, eps_clip, eps_clip_high, eps_clip_c=None):
    ratio = torch.exp(-ppo_kl)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float()


def _entropy(logits):
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def calculate_log_probs_and_entropy(
    logits,
    tokens,
    tp_group,
    with_entropy=False,
    entropy_requires_grad=True,
    chunk_size=-1,
    true_on_policy=False,
    vocab_size=None,
):
    assert not true_on_policy
    if logits.size(0) == 0:
        return logits.new_zeros((0, 1)), logits.new_zeros((0,)) if with_entropy else None
    size = chunk_size if chunk_size > 0 else logits.size(0)
    log_probs, entropies = [], []
    for rows, targets in zip(logits.split(size), tokens.split(size)):
        log_probs.append(torch.log_softmax(rows.float(), dim=-1).gather(-1, targets.unsqueeze(-1)))
        if with_entropy:
            with nullcontext() if entropy_requires_grad else torch.no_grad():
                entropies.append(_entropy(rows.float()))
    return torch.cat(log_probs), torch.cat(entropies) if with_entropy else None
