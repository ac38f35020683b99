"""Stand-in for TRL's trainer utilities: the same names and signatures, plain torch arithmetic (written here).

The heavy import below is what the real file has at its top: the adapter must take only the functions it needs.
"""

from contextlib import nullcontext

import pandas  # noqa: F401  (never executed by the adapter)
import torch
import torch.nn.functional as F
from transformers.utils import is_triton_available

_CHUNKED_LOGPROB_CHUNK_SIZE = 5


def maybe_gather_lm_head_ctx(*params):
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        return nullcontext()
    raise RuntimeError("stand-in: no DeepSpeed here")


def _supports_trl_loss_kernel(logits, index=None, row_mask=None):
    return logits.device.type in ("cuda", "xpu")


def selective_log_softmax(logits, index, temperature=1.0, row_mask=None):
    if is_triton_available() and _supports_trl_loss_kernel(logits, index, row_mask):
        return _fused_logprob_entropy(logits, index, temperature=temperature, row_mask=row_mask)[0]  # noqa: F821
    if temperature != 1.0:
        logits = logits / temperature
    return logits.log_softmax(-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits, chunk_size=128):
    log_p = F.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def selective_log_softmax_and_entropy(logits, index, entropy_requires_grad=True, temperature=1.0, row_mask=None):
    if temperature != 1.0:
        logits = logits / temperature
    logprobs = selective_log_softmax(logits, index)
    with nullcontext() if entropy_requires_grad else torch.no_grad():
        entropy = entropy_from_logits(logits)
    return logprobs, entropy
