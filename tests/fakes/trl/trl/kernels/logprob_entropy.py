"""Stand-in for TRL's Triton log-prob/entropy kernel module: same entry point, torch arithmetic (written here)."""

import torch
import triton  # noqa: F401  (the real module imports it at the top)


def selective_log_softmax_and_entropy(logits, index, temperature=1.0, row_mask=None):
    log_p = (logits.float() / temperature).log_softmax(-1)
    return log_p.gather(-1, index.unsqueeze(-1)).squeeze(-1), -(log_p.exp() * log_p).sum(-1)


__all__ = ["selective_log_softmax_and_entropy", "torch"]
