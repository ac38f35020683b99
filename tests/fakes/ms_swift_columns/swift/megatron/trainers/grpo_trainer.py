"""Stand-in (tests only): the Megatron GRPO trainer as ms-swift composed it before #9580 (written here).

Laid over ``tests/fakes/ms_swift`` by tests/test_ms_swift_columns.py. The rollout's columns are the batch's own:
``forward_step`` pops the ones the batch step must not see, computes the entropy only when ``self.compute_entropy``
(else it asks the model for its own loss and turns it into log-probs with ``self.get_logps``), gathers CP ranks with
the RLHF mixin's ``_postprocess_packed_tensor_cp`` and hands the loss its log-probs in the batch, returning the
model's output; ``loss_func`` reads the columns and those log-probs from the batch, one advantage per sequence
(until #9641).
"""

from functools import partial

import torch
from swift.rlhf_trainers.utils import pad_logps_back_to_batch, profiling_decorator

from .rlhf_mixin import MegatronRLHFTrainer
from .vocab_parallel_utils import compute_logps_and_entropy_from_logits


class MegatronGRPOTrainer(MegatronRLHFTrainer):
    @profiling_decorator
    def forward_step(self, data_iterator, model):
        data = next(data_iterator)
        advantages, truncated = data.pop("advantages"), data.pop("truncated_mask")
        lengths = data.pop("seq_lengths")
        data = self._prepare_batch(data)
        data.update({"advantages": advantages, "truncated_mask": truncated, "seq_lengths": lengths})
        inputs = self._prepare_model_inputs(data)
        labels, params, args = data["labels"], data.get("packed_seq_params"), self.args
        width, rows = data["completion_mask"].shape[1], self.micro_batch_size
        count = params.num_samples if args.padding_free else rows
        entropy = None
        if self.compute_entropy:
            output = model(**{k: v for k, v in inputs.items() if k != "labels"})
            if self.temperature != 1.0:
                output.div_(self.temperature)
            logps, entropy = compute_logps_and_entropy_from_logits(output, labels, compute_entropy=True)
            if args.context_parallel_size > 1:
                logps = self._postprocess_packed_tensor_cp(logps, params, count)
                entropy = self._postprocess_packed_tensor_cp(entropy, params, count)
        else:
            output = model(**inputs)
            logps = self.get_logps(output, labels, params, count, per_token=True)
        if args.padding_free:
            logps, _ = pad_logps_back_to_batch(logps, logits_to_keep=width, batch_size=rows, seq_lengths=lengths)
            if entropy is not None:
                entropy, _ = pad_logps_back_to_batch(
                    entropy, logits_to_keep=width, batch_size=rows, seq_lengths=lengths, pad_value=float("nan")
                )
        data["per_token_logps"], data["per_token_entropy"] = logps, entropy
        return output, partial(self.loss_func, data=data)

    @profiling_decorator
    def loss_func(self, output_tensor, data):
        mask, logps = data["completion_mask"], data.get("per_token_logps")
        coef_1 = torch.exp(logps - data.get("old_per_token_logps"))
        coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
        advantages = data["advantages"]  # one per sequence: widened over its tokens
        advantages = advantages.unsqueeze(1)
        per_token = -torch.min(coef_1 * advantages, coef_2 * advantages)
        if self.loss_type != "grpo":
            raise ValueError(self.loss_type)
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        return loss, {"loss": loss.detach()}
