"""Stand-in for NeMo-RL's ``nemo_rl/algorithms/loss/loss_functions.py``: ``ClippedPGLossFn``, written for the tests.

The names, the configuration fields ``__init__`` reads, the data dict's keys
(per-token entries ``[B, S]`` whose column 0 is dropped) and the call
signature are NeMo-RL's; the arithmetic is plain torch, written here from the
conventions in docs/policy-losses.md. Its imports name packages that are not
installed (the trainer's), which the adapter must stand in.
"""

from typing import Any, TypedDict

import torch
from nemo_rl.algorithms.loss.interfaces import LossFunction, LossInputType, LossType, MetricNormalizer
from nemo_rl.algorithms.utils import calculate_kl, masked_mean
from nemo_rl.distributed.batched_data_dict import BatchedDataDict
from nemo_rl.models.dtensor.parallelize import to_local_if_dtensor  # noqa: F401  (absent, unused by the loss)
from pydantic import BaseModel


class ClippedPGLossConfig(BaseModel, extra="allow"):
    disable_ppo_ratio: bool = False
    token_level_loss: bool = True
    sequence_level_importance_ratios: bool = False
    ratio_clip_min: float = 0.2
    ratio_clip_max: float = 0.2
    ratio_clip_c: float | None = None
    reference_policy_kl_penalty: float = 0.01
    reference_policy_kl_type: str = "k3"
    kl_input_clamp_value: float | None = 20.0
    kl_output_clamp_value: float | None = 10.0
    use_kl_in_reward: bool = False
    use_importance_sampling_correction: bool = False
    truncated_importance_sampling_type: str | None = None
    truncated_importance_sampling_ratio: float | None = None
    truncated_importance_sampling_ratio_min: float | None = None
    use_on_policy_kl_approximation: bool = False
    force_on_policy_ratio: bool = False
    use_cispo: bool = False
    positive_example_nll_weight: float = 0.0


class ClippedPGLossDataDict(TypedDict):
    advantages: torch.Tensor
    prev_logprobs: torch.Tensor
    generation_logprobs: torch.Tensor
    reference_policy_logprobs: torch.Tensor
    token_mask: torch.Tensor
    sample_mask: torch.Tensor
    __extra__: Any


class ClippedPGLossFn(LossFunction):
    """PPO-clip (dual clip, CISPO), a weighted KL term and truncated IS weights, token or sequence level."""

    input_type = LossInputType.LOGPROB

    def __init__(self, cfg: ClippedPGLossConfig, use_fused_linear_logprobs: bool = False):
        self.clip_low, self.clip_high, self.dual_c = cfg.ratio_clip_min, cfg.ratio_clip_max, cfg.ratio_clip_c
        self.kl_coef = 0 if cfg.use_kl_in_reward else cfg.reference_policy_kl_penalty
        self.kl_type = cfg.reference_policy_kl_type
        self.kl_clamps = (cfg.kl_input_clamp_value, cfg.kl_output_clamp_value)
        self.use_is = cfg.use_importance_sampling_correction
        self.tis_type = cfg.truncated_importance_sampling_type
        self.tis_max = cfg.truncated_importance_sampling_ratio
        self.tis_min = cfg.truncated_importance_sampling_ratio_min
        self.on_policy_kl = cfg.use_on_policy_kl_approximation
        self.use_cispo = cfg.use_cispo
        self.loss_type = LossType.TOKEN_LEVEL if cfg.token_level_loss else LossType.SEQUENCE_LEVEL
        assert not (cfg.disable_ppo_ratio or cfg.force_on_policy_ratio or cfg.sequence_level_importance_ratios)
        assert cfg.positive_example_nll_weight == 0
        if self.use_cispo:
            assert self.dual_c is None and self.loss_type == LossType.TOKEN_LEVEL
        self.metric_normalizations = {"loss": MetricNormalizer.TOKENS}

    def _reduce(self, per_token, token_mask, sample_mask, global_valid_seqs, global_valid_toks):
        if self.loss_type == LossType.TOKEN_LEVEL:
            return masked_mean(
                per_token, token_mask * sample_mask[:, None], global_normalization_factor=global_valid_toks
            )
        per_sample = masked_mean(per_token, token_mask, dim=-1)
        return masked_mean(per_sample, sample_mask, global_normalization_factor=global_valid_seqs)

    def __call__(
        self,
        next_token_logprobs: torch.Tensor,
        data: BatchedDataDict[ClippedPGLossDataDict],
        global_valid_seqs: torch.Tensor,
        global_valid_toks: torch.Tensor,
    ) -> tuple[torch.Tensor, dict]:
        logp = next_token_logprobs
        token_mask, sample_mask = data["token_mask"][:, 1:], data["sample_mask"]
        adv, old = data["advantages"][:, 1:], data["prev_logprobs"][:, 1:]
        generation_logprobs = data["generation_logprobs"][:, 1:]
        counts = (global_valid_seqs, global_valid_toks)

        kl = torch.tensor(0.0)
        if self.kl_coef != 0:
            ref = data["reference_policy_logprobs"][:, 1:]
            weight = torch.exp(logp - generation_logprobs) if self.on_policy_kl else torch.exp(logp - logp.detach())
            per_token = calculate_kl(logp, ref, self.kl_type, *self.kl_clamps, importance_sampling_weights=weight)
            kl = self._reduce(self.kl_coef * per_token, token_mask, sample_mask, *counts)

        ratio = torch.exp(logp - old)
        clipped = ratio.clamp(1 - self.clip_low, 1 + self.clip_high)
        if self.use_cispo:
            per_token = -adv * clipped.detach() * logp
        else:
            per_token = torch.maximum(-adv * ratio, -adv * clipped)
        if self.dual_c is not None:
            per_token = torch.where(adv < 0, torch.minimum(per_token, -adv * self.dual_c), per_token)

        weights = torch.ones_like(old)
        if self.use_is:
            weights = torch.exp(old - generation_logprobs)
            if self.tis_type == "tis":
                weights = weights.clamp(min=self.tis_min or 0.0, max=self.tis_max)
            elif self.tis_type == "icepop":
                inside = (weights >= self.tis_min) & (weights <= self.tis_max)
                weights = torch.where(inside, weights, torch.zeros_like(weights))
        loss = self._reduce(weights * per_token, token_mask, sample_mask, *counts) + kl
        return loss, {"loss": loss.item()}
