"""Stand-in (tests only): verl's policy-loss registry, vanilla PPO loss and loss aggregation."""

import torch
import verl.utils.torch_functional as verl_F
from omegaconf import DictConfig  # noqa: F401  (import-only)
from verl.trainer.config import AlgoConfig
from verl.utils import as_torch_index, group_mean_std  # noqa: F401
from verl.workers.config import ActorConfig  # noqa: F401

POLICY_LOSS_REGISTRY = {}


def register_policy_loss(name):
    def decorate(fn):
        POLICY_LOSS_REGISTRY[name] = fn
        return fn

    return decorate


def get_policy_loss_fn(name):
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"Unsupported loss mode: {name}")
    return POLICY_LOSS_REGISTRY[name]


def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None):
    if loss_agg_mode != "seq-mean-token-mean":
        raise ValueError(f"stand-in: loss_agg_mode {loss_agg_mode}")
    counts = loss_mask.sum(dim=-1)
    seq_losses = (loss_mat * loss_mask).sum(dim=-1) / (counts + 1e-8)
    seq_mask = (counts > 0).float()
    if global_batch_size is None:
        global_batch_size = seq_mask.sum()
    return verl_F.masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):
    assert config is not None and not isinstance(config, AlgoConfig)
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    low, high = config.clip_ratio_low, config.clip_ratio_high
    clipped = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - low, 1 + high))
    dual = torch.min(-advantages * config.get("clip_ratio_c", 3.0), clipped)
    pg_losses = torch.where(advantages < 0, dual, clipped)
    loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **config.global_batch_info)
    return loss, {}
