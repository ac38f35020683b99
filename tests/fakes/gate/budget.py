"""Stand-in "revisions" of impl/ for the gate's budget comparisons (tests/test_gate_cli.py).

``OneMoreBuffer`` is impl/ whose only change is one more fp32 ``[rows, V_local]``
buffer kept alive from the forward to the backward (saved by a no-op autograd
node, as a careless implementation keeps an fp32 copy of its input);
``TwoMoreBuffers`` keeps two. Against impl the first is a NEW FAIL of the
memory budget by pass/fail alone; against the first, the second is a NEW FAIL
by its figure (both exceed the 2x bound, the PR more than the base).
"""

from __future__ import annotations

import torch

from harness.targets.impl_target import ImplTarget


class _KeepAlive(torch.autograd.Function):
    """Returns its input unchanged and saves ``buffers`` for backward (so they live until then)."""

    @staticmethod
    def forward(ctx, values, *buffers):
        ctx.buffers = buffers  # held by the node (a Python reference, as the tracker counts storages it sees)
        return values.view_as(values)

    @staticmethod
    def backward(ctx, grad):
        count = len(ctx.buffers)
        del ctx.buffers
        return (grad, *(None for _ in range(count)))


class OneMoreBuffer(ImplTarget):
    name = "impl+1 fp32 [rows, V_local]"
    extra_buffers = 1

    def token_log_probs(self, logits, targets, **options):
        # Held by a node between the input and impl's Function, so the buffers live until the backward has
        # produced the logits' gradient (the peak), as an fp32 copy of the input kept for backward would.
        shape, device = logits.shape, logits.device
        buffers = [torch.empty(shape, dtype=torch.float32, device=device) for _ in range(self.extra_buffers)]
        return super().token_log_probs(_KeepAlive.apply(logits, *buffers), targets, **options)


class TwoMoreBuffers(OneMoreBuffer):
    name = "impl+2 fp32 [rows, V_local]"
    extra_buffers = 2
