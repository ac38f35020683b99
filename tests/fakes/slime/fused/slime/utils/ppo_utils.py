"""Stand-in (tests only): the newer slime token-level API, a plain single-TP-rank torch implementation."""

from contextlib import nullcontext

import torch


def compute_policy_loss(ppo_kl, advantages, eps_clip, eps_clip_high, eps_clip_c=None):
    ratio = torch.exp(-ppo_kl)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float()


def _entropy(logits):
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def calculate_log_probs_and_entropy(
    logits, tokens, tp_group, with_entropy=False, chunk_size=-1, log_prob_keep_mask=None, with_entropy_grad=True
):
    assert log_prob_keep_mask is None
    if logits.size(0) == 0:
        return logits.new_zeros((0, 1)), logits.new_zeros((0,)) if with_entropy else None
    size = chunk_size if chunk_size > 0 else logits.size(0)
    log_probs, entropies = [], []
    for rows, targets in zip(logits.split(size), tokens.split(size)):
        log_probs.append(torch.log_softmax(rows, dim=-1).gather(-1, targets.unsqueeze(-1)))
        if with_entropy:
            with nullcontext() if with_entropy_grad else torch.no_grad():
                entropies.append(_entropy(rows))
    return torch.cat(log_probs), torch.cat(entropies) if with_entropy else None
