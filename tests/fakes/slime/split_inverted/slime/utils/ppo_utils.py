"""Stand-in (tests only): the older slime token-level API (log-probs through Megatron's fused cross-entropy)."""

import torch


def compute_policy_loss(ppo_kl, advantages, eps_clip, eps_clip_high, eps_clip_c=None):
    ratio = torch.exp(-ppo_kl)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float()


def compute_log_probs(logits, tokens, process_group):
    from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy

    return -fused_vocab_parallel_cross_entropy(logits.unsqueeze(1), tokens.unsqueeze(1), process_group)


def compute_entropy_from_logits(logits, process_group):
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)
