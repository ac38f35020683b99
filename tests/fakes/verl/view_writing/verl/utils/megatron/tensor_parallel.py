"""Stand-in (tests only): an entropy Function that saves its input and writes it in backward, as verl 0.9.1's."""

import torch
from megatron.core import parallel_state as mpu  # noqa: F401  (verl reads its group from mpu)


class _Entropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits):
        p = logits.softmax(dim=-1)
        mean_logit = (p * logits).sum(dim=-1, keepdim=True)
        ctx.save_for_backward(logits, p, mean_logit)
        return (logits.logsumexp(dim=-1, keepdim=True) - mean_logit).squeeze(-1)

    @staticmethod
    def backward(ctx, grad):
        logits, p, mean_logit = ctx.saved_tensors
        logits.sub_(mean_logit)  # the saved input is written, then restored
        out = -p * logits * grad.unsqueeze(-1)
        logits.add_(mean_logit)
        return out


def vocab_parallel_entropy(vocab_parallel_logits):
    return _Entropy.apply(vocab_parallel_logits)


def vocab_parallel_entropy_with_chunking(vocab_parallel_logits, chunk_size=2048):
    entropy = torch.zeros(vocab_parallel_logits.shape[:-1], device=vocab_parallel_logits.device)
    for i in range(0, vocab_parallel_logits.shape[1], chunk_size):
        entropy[:, i : i + chunk_size] = _Entropy.apply(vocab_parallel_logits[:, i : i + chunk_size, :])
    return entropy


def vocab_parallel_log_probs_from_logits(logits, labels):
    from megatron.core import tensor_parallel

    return -tensor_parallel.vocab_parallel_cross_entropy(vocab_parallel_logits=logits, target=labels)
