"""Stand-in (tests only): ``calculate_log_probs_and_entropy(logits, tokens, tp_group, with_entropy)``, no gate."""

import torch


def compute_policy_loss(ppo_kl, advantages, eps_clip, eps_clip_high, eps_clip_c=None):
    ratio = torch.exp(-ppo_kl)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float()


def calculate_log_probs_and_entropy(logits, tokens, tp_group, with_entropy=False):
    log_p = torch.log_softmax(logits, dim=-1)
    log_prob = log_p.gather(-1, tokens.unsqueeze(-1))
    entropy = -(log_p.exp() * log_p).sum(dim=-1) if with_entropy else None
    return log_prob, entropy
