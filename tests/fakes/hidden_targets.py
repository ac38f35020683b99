"""Stand-in hidden-state targets carrying the historic bugs, to show the hidden-path checks have teeth.

Simple, obviously-written arithmetic (not upstream code): full logits, then
the mechanism of a bug.

* ``OneHotHidden``: unfused logits and a backward that places the target's
  gradient with ``one_hot(targets, V_local)`` (docs/bugs.md #3; NeMo-RL's
  ``ChunkedDistributedHiddenStatesToLogprobs`` backward has this mechanism).
* ``InPlaceHidden``: correct values, but the forward scales ``hidden`` in
  place and back (the borrow-then-restore class of docs/bugs.md #2).
"""

from __future__ import annotations

import torch

from harness.targets import Target


class _OneHotLogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets):
        logits = hidden.float() @ weight.float().T
        log_p = torch.log_softmax(logits, dim=-1)
        ctx.save_for_backward(hidden, weight, targets, log_p)
        return log_p.gather(1, targets.unsqueeze(1)).squeeze(1)

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, targets, log_p = ctx.saved_tensors
        one_hot = torch.nn.functional.one_hot(targets, num_classes=weight.shape[0])
        grad_logits = (one_hot - log_p.exp()) * grad.unsqueeze(1)
        return (grad_logits @ weight.float()).to(hidden.dtype), (grad_logits.T @ hidden.float()).to(weight.dtype), None


class OneHotHidden(Target):
    name = "stand-in-one-hot-hidden"
    capabilities = frozenset({"hidden", "chunking"})

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        return _OneHotLogProb.apply(hidden, weight, targets), None


class InPlaceHidden(Target):
    name = "stand-in-in-place-hidden"
    capabilities = frozenset({"hidden", "chunking", "temperature"})

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        with torch.no_grad():
            hidden.mul_(1.0 / temperature)
            logits = hidden @ weight.T
            hidden.mul_(temperature)
        logits = hidden @ weight.T / temperature
        return torch.log_softmax(logits.float(), dim=-1).gather(1, targets.unsqueeze(1)).squeeze(1), None
