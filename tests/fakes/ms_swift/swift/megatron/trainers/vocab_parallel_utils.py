"""Stand-in for ms-swift's vocab-parallel utilities: its entry point and imports, plain torch (written here)."""

import torch
from megatron.core import mpu, tensor_parallel


def _vocab_parallel_log_softmax(logits):
    group = mpu.get_tensor_model_parallel_group()
    with torch.no_grad():
        top = logits.max(-1, keepdim=True)[0]
        torch.distributed.all_reduce(top, op=torch.distributed.ReduceOp.MAX, group=group)
    total = torch.distributed.nn.all_reduce((logits - top).exp().sum(-1, keepdim=True), group=group)
    return logits - top - total.log()


def compute_logps_and_entropy_from_logits(logits, labels, compute_entropy=False, entropy_chunk_size=512):
    entropy = None
    if compute_entropy:
        log_p = _vocab_parallel_log_softmax(logits)
        partial = -(log_p.exp() * log_p).sum(-1)
        # A raw all-reduce, as ms-swift's: every rank's backward already sees the total derivative.
        torch.distributed.all_reduce(partial, group=mpu.get_tensor_model_parallel_group())
        entropy = partial
    safe = labels.masked_fill(labels == -100, 0)
    return -tensor_parallel.vocab_parallel_cross_entropy(vocab_parallel_logits=logits, target=safe), entropy
