"""Stand-in (tests only): a GRPO trainer whose ``_compute_loss_and_metrics`` reads the attributes ms-swift's does.

Written from scratch for tests/test_ms_swift_policy.py: the module imports
absent packages and the class derives from an absent trainer, so only the
method can be loaded. Its loss: token or GSPO-token ratios clipped PPO-style
(``args.delta`` capping the ratio), a clamped k3 KL, and the aggregations of
``loss_type`` ``grpo`` / ``bnpo`` / ``dr_grpo``.
"""

from typing import Any

import torch
from accelerate.utils import gather, gather_object  # noqa: F401
from swift.rl_core.data import GRPOBatch
from trl import GRPOTrainer as HFGRPOTrainer
from trl.trainer.grpo_trainer import nanmax, nanmin


class GRPOTrainer(HFGRPOTrainer):
    def _compute_loss_and_metrics(self, model, model_inputs: dict[str, Any], grpo_batch: GRPOBatch):
        mask = grpo_batch.completion_mask
        logps, _ = self._get_per_token_logps_and_entropies(model, model_inputs, grpo_batch, compute_entropy=False)
        log_ratio = logps - grpo_batch.old_per_token_logps
        if self.importance_sampling_level == "sequence_token":
            seq = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
            log_ratio = logps - logps.detach() + seq.detach()
        coef_1 = torch.exp(log_ratio)
        coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
        if self.args.delta is not None:
            coef_1 = torch.clamp(coef_1, max=self.args.delta)
        advantages = grpo_batch.advantages
        per_token = -torch.min(coef_1 * advantages, coef_2 * advantages)
        if self.beta != 0.0:
            x = torch.clamp(grpo_batch.ref_per_token_logps - logps, min=-20, max=20)
            per_token = per_token + self.beta * torch.clamp(torch.exp(x) - x - 1, min=-10, max=10)
        if self.loss_type == "grpo":
            loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        elif self.loss_type == "bnpo":
            loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
        elif self.loss_type == "dr_grpo":
            loss = (per_token * mask).sum() / (mask.shape[0] * self.max_completion_length)
        else:
            raise ValueError(self.loss_type)
        ratios = coef_1.detach().flatten()
        return loss, {"mode": "train", "ratio_min": nanmin(ratios), "ratio_max": nanmax(ratios)}
