"""Float64 references (docs/math.md), importing torch only, never ``impl/`` or ``harness/``.

An oracle that reuses production code proves nothing.

Modules (``layout``, ``losses``, ``token``) and their public functions are both exported.
"""

from . import layout, losses, token
from .layout import (
    bshd_seq_len,
    padded_length,
    response_rows,
    response_targets,
    sample_position_of_row,
    sample_starts,
    stream_rows,
    thd_stream_length,
)
from .losses import packed_reference, per_sample, policy_loss, probe_loss, sum_of_sample_mean
from .token import entropy, log_probs, log_sum_exp, naive_entropy, naive_log_probs

__all__ = [
    "layout",
    "losses",
    "token",
    "bshd_seq_len",
    "padded_length",
    "response_rows",
    "response_targets",
    "sample_position_of_row",
    "sample_starts",
    "stream_rows",
    "thd_stream_length",
    "packed_reference",
    "per_sample",
    "policy_loss",
    "probe_loss",
    "sum_of_sample_mean",
    "entropy",
    "log_probs",
    "log_sum_exp",
    "naive_entropy",
    "naive_log_probs",
]
