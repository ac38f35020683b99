"""Stand-in for TRL's trainer utilities: the same names and signatures, plain torch arithmetic (written here).

The heavy import below is what the real file has at its top: the harness must take only the functions it needs.
"""

import types
from contextlib import nullcontext
from dataclasses import dataclass

import pandas  # noqa: F401  (never executed by the harness)
import torch
import torch.nn.functional as F
from transformers.utils import ModelOutput, is_triton_available

from ..kernels import ChunkedLogProbFunction as _ChunkedLogProbFunction

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


def nanmin(tensor):
    kept = tensor[~torch.isnan(tensor)]
    return kept.min() if kept.numel() else torch.tensor(float("nan"))


def nanmax(tensor):
    kept = tensor[~torch.isnan(tensor)]
    return kept.max() if kept.numel() else torch.tensor(float("nan"))


@dataclass
class FusedCausalLMOutput(ModelOutput):
    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None


def add_fused_lm_head(model, temperature=1.0, cast_lm_head_to_fp32=False, outputs=("log_probs",)):
    original_forward = model.forward

    def _fused_forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, **kwargs):
        if not fused_lm_head:
            return original_forward(*args, **kwargs)
        hidden_states = self.base_model(*args, **kwargs).last_hidden_state
        if shift_labels is None:
            hidden_states, labels = hidden_states[:, :-1], labels[:, 1:]
        else:
            labels = shift_labels
        lm_head = self.get_output_embeddings()
        mask = labels != -100
        with maybe_gather_lm_head_ctx(lm_head.weight, lm_head.bias):
            per_token = _ChunkedLogProbFunction.apply(
                hidden_states.reshape(-1, hidden_states.size(-1)),
                lm_head.weight,
                lm_head.bias,
                labels.clamp(min=0).reshape(-1),
                temperature,
                _CHUNKED_LOGPROB_CHUNK_SIZE,
                None,
                1.0,
                outputs,
            )
        log_probs, entropy = (None if x is None else x.view(mask.shape).masked_fill(~mask, 0) for x in per_token[:2])
        return FusedCausalLMOutput(log_probs=log_probs, entropy=entropy)

    model.forward = types.MethodType(_fused_forward, model)
