"""Stand-in (tests only): verl's vocab-parallel entropy and log-prob functions, plain torch."""

import torch
from megatron.core import parallel_state as mpu


def _all_reduce(tensor, op=torch.distributed.ReduceOp.SUM):
    tensor = tensor.clone()
    torch.distributed.all_reduce(tensor, op=op, group=mpu.get_tensor_model_parallel_group())
    return tensor


class _Entropy(torch.autograd.Function):
    """``H = lse - sum p z`` over the TP group; backward ``dH/dz = p (sum p z - z)``, local to the shard."""

    @staticmethod
    def forward(ctx, logits):
        shift = _all_reduce(logits.amax(dim=-1, keepdim=True), torch.distributed.ReduceOp.MAX)
        exp = (logits - shift).exp()
        total = _all_reduce(exp.sum(dim=-1, keepdim=True))
        p = exp / total
        mean_logit = _all_reduce((p * logits).sum(dim=-1, keepdim=True))
        ctx.save_for_backward(logits, p, mean_logit)
        return (shift + total.log() - mean_logit).squeeze(-1)

    @staticmethod
    def backward(ctx, grad):
        logits, p, mean_logit = ctx.saved_tensors
        return grad.unsqueeze(-1) * p * (mean_logit - logits)


def vocab_parallel_entropy(vocab_parallel_logits):
    return _Entropy.apply(vocab_parallel_logits.float()).to(vocab_parallel_logits.dtype)


def vocab_parallel_entropy_with_chunking(vocab_parallel_logits, chunk_size=2048):
    pieces = [
        vocab_parallel_entropy(vocab_parallel_logits[:, i : i + chunk_size, :])
        for i in range(0, vocab_parallel_logits.shape[1], chunk_size)
    ]
    return torch.cat(pieces, dim=1) if pieces else vocab_parallel_logits.new_zeros(vocab_parallel_logits.shape[:-1])


def vocab_parallel_log_probs_from_logits(logits, labels):
    from megatron.core import tensor_parallel

    return -tensor_parallel.vocab_parallel_cross_entropy(vocab_parallel_logits=logits, target=labels)
