"""Stand-in for TRL's ``ChunkedLogProbFunction``: its signature and outputs, over vocabulary tiles (written here)."""

import torch
from transformers.utils import is_triton_available  # noqa: F401  (the real module's one transformers import)


class ChunkedLogProbFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_size, softcap=None, logit_scale=1.0, outputs=()):
        logits = torch.cat(
            [hidden.float() @ weight[s : s + chunk_size].float().T for s in range(0, weight.shape[0], chunk_size)], -1
        )
        log_p = (logits * logit_scale / temperature).log_softmax(-1)
        entropy = -(log_p.exp() * log_p).sum(-1) if "entropy" in outputs else None
        ctx.save_for_backward(hidden, weight, targets, log_p)
        ctx.temperature, ctx.logit_scale = temperature, logit_scale
        return log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy, None, None, None

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy, *_):
        from ..trainer.utils import maybe_gather_lm_head_ctx

        hidden, weight, targets, log_p = ctx.saved_tensors
        with maybe_gather_lm_head_ctx(weight):
            p = log_p.exp()
            grad = torch.zeros_like(log_p)
            if grad_logprobs is not None:
                onehot = torch.zeros_like(p).scatter_(-1, targets.unsqueeze(-1), 1.0)
                grad += grad_logprobs.float().unsqueeze(-1) * (onehot - p)
            if grad_entropy is not None:
                entropy = -(p * log_p).sum(-1, keepdim=True)
                grad -= grad_entropy.float().unsqueeze(-1) * p * (log_p + entropy)
            grad = grad * ctx.logit_scale / ctx.temperature
            grad_hidden = (grad @ weight.float()).to(hidden.dtype)
            grad_weight = (grad.T @ hidden.float()).to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None, None, None
