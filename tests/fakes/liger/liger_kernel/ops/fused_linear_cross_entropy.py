"""Stand-in ``LigerFusedLinearCrossEntropyFunction`` (signature and return tuple; plain autograd; written here)."""

import torch


class LigerFusedLinearCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, bias=None, ce_weight=None, ignore_index=-100, lse_square_scale=0.0,
                label_smoothing=0.0, reduction="mean", *rest):  # fmt: skip
        with torch.enable_grad():
            h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
            loss = torch.nn.functional.cross_entropy(h @ w.T, target, reduction="none")
        ctx.save_for_backward(h, w, loss)
        return loss.detach(), None, None, None

    @staticmethod
    def backward(ctx, grad_output, *_):
        h, w, loss = ctx.saved_tensors
        grad_hidden, grad_weight = torch.autograd.grad(loss, (h, w), grad_output)
        return grad_hidden, grad_weight, *([None] * 20)
