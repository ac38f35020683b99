"""Stand-in for SkyRL's Megatron model wrapper: only the shape of its loss_func's entropy decisions.

The adapter never executes this file; it reads the argument of the
``torch.set_grad_enabled`` around the entropy and the condition that adds the
entropy term, as it reads them in SkyRL's wrapper.
"""

import torch


class MegatronModelWrapper:
    def forward_backward_mini_batch(self, micro_batches, loss_config, entropy_fn, temperature=1.0):
        fused_lm_head = False

        def loss_func(logits, data):
            if temperature != 1.0 and not fused_lm_head:
                logits.div_(temperature)
            with torch.set_grad_enabled(loss_config.use_entropy_loss):
                entropy = entropy_fn(logits)
            if loss_config.use_entropy_loss:
                entropy_loss_term = entropy * loss_config.entropy_loss_coef
            else:
                entropy_loss_term = torch.tensor(0.0)
            return -entropy_loss_term

        return [loss_func(batch["logits"], batch) for batch in micro_batches]
