"""Stand-in for SkyRL's ppo_utils: its signatures, with plain arithmetic written here.

Like SkyRL's module it imports loguru and the trainer config at module level (and Ray, through the registry
stand-in beside it), so loading it exercises the adapter's import stand-ins.
"""

import torch
from loguru import logger
from skyrl.backends.skyrl_train.utils.registry import PolicyLossRegistry
from skyrl.train.config import AlgorithmConfig


def ppo_policy_loss(
    log_probs, old_log_probs, advantages, config: AlgorithmConfig, loss_mask=None, rollout_logprobs=None
):
    """Clipped PG loss per token, summed under the mask (the advantages carry the reduction)."""
    ratio = torch.exp((log_probs - old_log_probs).clamp(-20.0, 20.0))
    clipped = ratio.clamp(1 - config.eps_clip_low, 1 + config.eps_clip_high)
    loss = -torch.minimum(ratio * advantages, clipped * advantages)
    logger.debug("stand-in ppo_policy_loss")
    return (loss * loss_mask).sum(), {}


PolicyLossRegistry.register("regular", ppo_policy_loss)


def apply_loss_reduction_to_advantages_minibatch(advantages, loss_mask, loss_reduction, micro_batch_size, max_seq_len):
    """Only ``sequence_mean``: each row divided by batch size times its mask count (at least 1)."""
    if loss_reduction != "sequence_mean":
        raise ValueError(f"the stand-in implements sequence_mean only, not {loss_reduction}")
    return advantages / (advantages.shape[0] * loss_mask.sum(dim=-1, keepdim=True).clamp(min=1))
