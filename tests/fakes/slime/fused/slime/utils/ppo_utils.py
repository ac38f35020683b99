"""Stand-in (tests only): the newer slime token-level API, a plain single-TP-rank torch implementation."""

from contextlib import nullcontext

import torch


def compute_policy_loss(ppo_kl, advantages, eps_clip, eps_clip_high, eps_clip_c=None):
    """PPO-clip, and the dual clip where ``eps_clip_c`` is given (the loss capped at ``-c A`` where ``A < 0``).

    The stand-in's ``policy_loss_function`` never passes ``eps_clip_c`` (slime before #2247): the option is
    present but not wired, which the checks must report as a FAIL."""
    ratio = torch.exp(-ppo_kl)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    losses = torch.maximum(unclipped, clipped)
    if eps_clip_c is not None:
        losses = torch.where(advantages < 0, torch.minimum(losses, -eps_clip_c * advantages), losses)
    return losses, (clipped > unclipped).float()


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
