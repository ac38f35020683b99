"""Stand-in (tests only): a GRPO trainer whose ``_compute_loss`` reads the attributes TRL's does.

Written from scratch for tests/test_trl_policy.py: the class derives from a
trainer of a package that is absent here, so only the method can be loaded.
Its loss: token ratios clipped PPO-style (``args.delta`` capping the ratio),
an unclamped k3 KL (optionally ratio-weighted), the aggregations of
``loss_type`` ``grpo`` / ``dapo`` / ``dr_grpo`` and a token-mean entropy bonus.
"""

import torch
from transformers import Trainer

from .utils import nanmax, nanmin


class GRPOTrainer(Trainer):
    def _compute_loss(self, model, inputs):
        mask = inputs["completion_mask"]
        logps, entropies, _ = self._get_per_token_logps_and_entropies(model, None, None, mask.size(1))
        advantages = inputs["advantages"]
        ratio = torch.exp(logps - inputs["old_per_token_logps"])
        clipped = torch.clamp(ratio, 1 - self.epsilon_low, 1 + self.epsilon_high)
        if self.args.delta is not None:
            ratio = torch.clamp(ratio, max=self.args.delta)
        per_token = -torch.min(ratio * advantages, clipped * advantages)
        if self.beta != 0.0:
            d = inputs["ref_per_token_logps"] - logps
            kl = torch.exp(d) - d - 1
            if self.args.use_bias_correction_kl:
                kl = kl * torch.exp(logps - inputs["old_per_token_logps"])
            per_token = per_token + self.beta * kl
        masked = per_token * mask
        if self.loss_type == "grpo":
            loss = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        elif self.loss_type == "dapo":
            loss = masked.sum() / inputs["num_items_in_batch"].clamp(min=1.0)
        elif self.loss_type == "dr_grpo":
            loss = masked.sum() / (per_token.size(0) * self.max_completion_length)
        else:
            raise ValueError(self.loss_type)
        if self._entropy_bonus_enabled:
            loss = loss - self.entropy_coef * (entropies * mask).sum() / mask.sum().clamp(min=1.0)
        self._metrics["train"]["ratio_min"].append(nanmin(ratio.detach().flatten()))
        self._metrics["train"]["ratio_max"].append(nanmax(ratio.detach().flatten()))
        return loss
