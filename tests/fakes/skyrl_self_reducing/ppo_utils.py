"""Stand-in for SkyRL's ppo_utils before its reduction moved into the advantages: each registry loss reduces
itself by ``reduce_loss(loss, loss_mask, config.loss_reduction, config.max_seq_len)``, and a KL estimator.

Its signatures are SkyRL's; the arithmetic is plain and written here. ``tests/fakes/skyrl_targets.py``
(``self_reducing_tree``) puts it in a copy of ``skyrl_fixed`` in place of that tree's ppo_utils.
"""

import torch
from loguru import logger
from skyrl.backends.skyrl_train.utils.registry import PolicyLossRegistry
from skyrl.train.config import AlgorithmConfig


def compute_approx_kl(log_probs, log_probs_base, loss_mask=None, kl_estimator_type="k3"):
    """The per-token KL estimate (k3 clamped as SkyRL clamps it), zero where masked."""
    log_ratio = log_probs - log_probs_base
    if kl_estimator_type == "k1":
        kl = log_ratio
    elif kl_estimator_type == "k2":
        kl = 0.5 * log_ratio.square()
    elif kl_estimator_type == "abs":
        kl = log_ratio.abs()
    elif kl_estimator_type == "k3":
        reverse = (-log_ratio).clamp(-20.0, 20.0)
        kl = (reverse.exp() - reverse - 1).clamp(-10.0, 10.0)
    else:
        raise ValueError(f"unknown kl_estimator_type {kl_estimator_type!r}")
    return kl if loss_mask is None else kl * loss_mask


def reduce_loss(loss, loss_mask, loss_reduction, max_seq_len=None):
    """token_mean, sequence_mean (per-sequence mean, then the batch's) or seq_mean_token_sum_norm (per-sequence
    sum over ``max_seq_len``, then the batch's mean); every count at least 1."""
    if loss_reduction == "token_mean":
        return (loss * loss_mask).sum() / loss_mask.sum().clamp(min=1.0)
    if loss_reduction == "sequence_mean":
        return ((loss * loss_mask).sum(-1) / loss_mask.sum(-1).clamp(min=1.0)).mean()
    if loss_reduction == "seq_mean_token_sum_norm":
        return ((loss * loss_mask).sum(-1) / max_seq_len).mean()
    raise ValueError(f"unknown loss_reduction {loss_reduction!r}")


def ppo_policy_loss(
    log_probs, old_log_probs, advantages, config: AlgorithmConfig, loss_mask=None, rollout_logprobs=None
):
    """Clipped PG loss per token (dual clip where the type says), reduced by the configured mode."""
    ratio = torch.exp((log_probs - old_log_probs).clamp(-20.0, 20.0))
    clipped = ratio.clamp(1 - config.eps_clip_low, 1 + config.eps_clip_high)
    loss = -torch.minimum(ratio * advantages, clipped * advantages)
    if config.policy_loss_type == "dual_clip":
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * config.clip_ratio_c), loss)
    if config.use_tis:
        raise NotImplementedError("the stand-in has no rollout correction")
    logger.debug("stand-in self-reducing ppo_policy_loss")
    return reduce_loss(loss, loss_mask, config.loss_reduction, config.max_seq_len), {}


PolicyLossRegistry.register("regular", ppo_policy_loss)
PolicyLossRegistry.register("dual_clip", ppo_policy_loss)
