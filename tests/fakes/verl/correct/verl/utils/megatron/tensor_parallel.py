"""Stand-in (tests only): verl's vocab-parallel entropy and log-prob functions, plain autograd."""

import torch
import torch.distributed.nn.functional as dist_nn
from megatron.core import parallel_state as mpu


def _all_reduce(tensor, op=torch.distributed.ReduceOp.SUM):
    group = mpu.get_tensor_model_parallel_group()
    return dist_nn.all_reduce(tensor, op=op, group=group)


def vocab_parallel_entropy(vocab_parallel_logits):
    logits = vocab_parallel_logits.float()
    shift = _all_reduce(logits.detach().amax(dim=-1, keepdim=True), torch.distributed.ReduceOp.MAX)
    exp = (logits - shift).exp()
    total = _all_reduce(exp.sum(dim=-1, keepdim=True))
    p = exp / total
    mean_logit = _all_reduce((p * logits).sum(dim=-1, keepdim=True))
    return (shift + total.log() - mean_logit).squeeze(-1).to(vocab_parallel_logits.dtype)


def vocab_parallel_entropy_with_chunking(vocab_parallel_logits, chunk_size=2048):
    pieces = [
        vocab_parallel_entropy(vocab_parallel_logits[:, i : i + chunk_size, :])
        for i in range(0, vocab_parallel_logits.shape[1], chunk_size)
    ]
    return torch.cat(pieces, dim=1) if pieces else vocab_parallel_logits.new_zeros(vocab_parallel_logits.shape[:-1])


def vocab_parallel_log_probs_from_logits(logits, labels):
    from megatron.core import tensor_parallel

    return -tensor_parallel.vocab_parallel_cross_entropy(vocab_parallel_logits=logits, target=labels)
