"""Stand-in ``LigerCrossEntropyFunction``: Liger's signature and return tuple; like Liger's, it writes the logits'
gradient into its input in forward (written here)."""

import torch


class LigerCrossEntropyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, _input, target, weight, ignore_index=-100, lse_square_scale=0.0, label_smoothing=0.0,
                reduction="mean", softcap=None, return_z_loss=False, return_token_accuracy=False,
                return_predicted_tokens=False):  # fmt: skip
        log_p = _input.float().log_softmax(-1)
        kept = target != ignore_index
        loss = -log_p.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1) * kept
        grad = log_p.exp().scatter_add(-1, target.clamp(min=0).unsqueeze(-1), -torch.ones_like(log_p[:, :1]))
        _input.copy_(grad * kept.unsqueeze(-1))
        ctx.save_for_backward(_input.detach())
        return loss.to(_input.dtype), None, None, None

    @staticmethod
    def backward(ctx, grad_output, *_):
        (grad,) = ctx.saved_tensors
        return (grad * grad_output.unsqueeze(-1)).to(grad.dtype), *([None] * 10)
