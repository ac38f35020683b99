"""impl with a defect on its forward-only path alone: what ``harness/checks/forward_only.py`` must catch."""

import torch

from harness.targets.impl_target import ImplTarget


class KeepsAGraph(ImplTarget):
    """Computes under ``enable_grad`` whatever the caller asked: a graph under ``no_grad``."""

    name = "keeps-a-graph"

    def token_log_probs(self, logits, targets, **kwargs):
        with torch.enable_grad():
            return super().token_log_probs(
                logits.requires_grad_(True) if not logits.requires_grad else logits, targets, **kwargs
            )


class RoundsOtherwise(ImplTarget):
    """A forward-only 'fast path' that rounds through bf16: other values than the training call's."""

    name = "rounds-otherwise"

    def packed_log_probs(self, logits, inputs, **kwargs):
        log_probs, entropy = super().packed_log_probs(logits, inputs, **kwargs)
        if not torch.is_grad_enabled():
            log_probs = [values.bfloat16().float() for values in log_probs]
        return log_probs, entropy


class NeedsAGraph(ImplTarget):
    """A forward that assumes its inputs require grad (a ``.grad_fn`` read, a hook registered on them)."""

    name = "needs-a-graph"

    def hidden_log_probs(self, hidden, weight, targets, **kwargs):
        hidden.register_hook(lambda grad: grad)
        return super().hidden_log_probs(hidden, weight, targets, **kwargs)
