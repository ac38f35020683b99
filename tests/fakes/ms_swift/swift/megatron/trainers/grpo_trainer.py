"""Stand-in (tests only): a Megatron GRPO trainer whose ``forward_step`` and ``loss_func`` compose as ms-swift's do.

Written from scratch for tests/test_ms_swift_target.py and test_ms_swift_policy.py: the module imports absent
packages and the class derives from absent trainers, so only the methods can be loaded. ``forward_step``: the
model's output divided in place by the temperature, then the utilities' log-probs and entropy, whole sequences
gathered under CP and the padding-free rows put back into a batch; ``loss_func``:
token or GSPO-token ratios clipped PPO-style (``args.delta`` capping the ratio), a clamped k3 KL, and the
aggregations of ``loss_type`` ``grpo`` / ``bnpo`` / ``dr_grpo``.
"""

from functools import partial

import torch
from megatron.core import mpu
from swift.rl_core.data import GRPOBatch
from swift.rlhf_trainers.utils import pad_logps_back_to_batch, profiling_decorator

from .rlhf_mixin import MegatronRLHFTrainer
from .utils import gather, reconstruct_tensor_cp
from .vocab_parallel_utils import compute_logps_and_entropy_from_logits


class MegatronGRPOTrainer(MegatronRLHFTrainer):
    @profiling_decorator
    def forward_step(self, data_iterator, model):
        data = next(data_iterator)
        grpo_batch: GRPOBatch = data.pop("grpo_batch")
        data = self._prepare_batch(data)
        labels = data.pop("labels", None)
        params = data.get("packed_seq_params")
        output = model(**data)
        if mpu.is_pipeline_last_stage():
            if self.temperature != 1.0:
                output.div_(self.temperature)
            logps, entropy = compute_logps_and_entropy_from_logits(output, labels, compute_entropy=self.compute_entropy)
            args, width = self.args, grpo_batch.completion_mask.shape[1]
            if args.context_parallel_size > 1:
                count = params.seq_lens.shape[0]
                logps = reconstruct_tensor_cp(args.context_parallel_size, logps, params, count, args.cp_partition_mode)
                if entropy is not None:
                    cp = args.context_parallel_size
                    entropy = reconstruct_tensor_cp(cp, entropy, params, count, args.cp_partition_mode)
            if args.padding_free:
                lengths, rows = grpo_batch.seq_lengths, self.micro_batch_size
                logps, _ = pad_logps_back_to_batch(logps, logits_to_keep=width, batch_size=rows, seq_lengths=lengths)
                if entropy is not None:
                    entropy, _ = pad_logps_back_to_batch(
                        entropy, logits_to_keep=width, batch_size=rows, seq_lengths=lengths, pad_value=float("nan")
                    )
            output = logps
            data["per_token_entropy"] = entropy
        data["grpo_batch"] = grpo_batch
        return output, partial(self.loss_func, data=data)

    @profiling_decorator
    def loss_func(self, output_tensor, data):
        batch = data["grpo_batch"]
        mask, logps = batch.completion_mask, output_tensor
        log_ratio = logps - batch.old_per_token_logps
        if self.importance_sampling_level == "sequence_token":
            seq = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
            log_ratio = logps - logps.detach() + seq.detach()
        coef_1 = torch.exp(log_ratio)
        coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
        if self.args.delta is not None:
            coef_1 = torch.clamp(coef_1, max=self.args.delta)
        advantages = batch.advantages
        per_token = -torch.min(coef_1 * advantages, coef_2 * advantages)
        if self.beta != 0.0:
            x = torch.clamp(batch.ref_per_token_logps - logps, min=-20, max=20)
            per_token = per_token + self.beta * torch.clamp(torch.exp(x) - x - 1, min=-10, max=10)
        if self.loss_type == "grpo":
            loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        elif self.loss_type == "bnpo":
            normaliser = batch.num_items_in_batch / mpu.get_data_parallel_world_size()
            loss = (per_token * mask).sum() / normaliser.clamp(min=1.0) * self.args.num_microbatches
        elif self.loss_type == "dr_grpo":
            loss = (per_token * mask).sum() / (self.micro_batch_size * self.max_completion_length)
        else:
            raise ValueError(self.loss_type)
        lengths = gather(mask.sum(-1), group=mpu.get_data_parallel_group(with_context_parallel=True))
        return loss, self._all_reduce_metric({"loss": loss.detach(), "length": lengths.float().mean()})
