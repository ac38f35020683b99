"""Input validation shared by impl's entry points: bad input is a clear error, never a wrong answer.

The token-level Function (logits) and the hidden-state path (hidden states and
an LM-head shard) take the same targets, chunk size and temperature, and both
refuse a target outside the padded vocabulary (a silent log-prob of 0 is how
an off-by-a-shard target id reads otherwise). Each check lives here once, so
the two entry points cannot drift apart in what they accept or in how the
error names the argument and the fix (the bad-input tables in
``properties/test_bad_inputs.py`` and ``properties/test_hidden_bad_inputs.py``
match these texts).

Values are read (``min``/``max``) only from real tensors: fake tensors, used
for the memory checks at real scale, carry none.
"""

from __future__ import annotations

import torch

from .row_stats import tp_world

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def is_fake(tensor: torch.Tensor) -> bool:
    """Fake and meta tensors (shape-only traces: memory checks at real scale) carry no values to validate."""
    from torch._subclasses.fake_tensor import is_fake as _is_fake

    return tensor.is_meta or _is_fake(tensor)


def check_matrix(name: str, tensor, layout: str) -> None:
    """``tensor`` is a 2-D float tensor of a supported dtype; ``layout`` names its dims, e.g. ``[rows, V_local]``."""
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
        got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"{name} must be a 2-D tensor {layout}; got {got}: flatten batch dims first")
    if tensor.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {tensor.dtype}")


def check_chunk_size(chunk_size) -> None:
    if chunk_size is None:
        return
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be an int or None, got {type(chunk_size).__name__}")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive number of rows (or None for one chunk), got {chunk_size}")


def check_temperature(temperature) -> None:
    if not isinstance(temperature, (int, float)) or not temperature > 0 or temperature == float("inf"):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r}")


def check_targets(targets, count: int, per: str, beside: str, device) -> None:
    """``targets`` is a 1-D integer tensor of ``count`` ids (one ``per`` row), on the device of ``beside``."""
    if not isinstance(targets, torch.Tensor) or targets.dim() != 1 or targets.shape[0] != count:
        got = tuple(targets.shape) if isinstance(targets, torch.Tensor) else type(targets).__name__
        raise ValueError(f"targets must be a 1-D tensor with one id per {per} row ({count}), got {got}")
    if targets.dtype.is_floating_point or targets.dtype.is_complex or targets.dtype == torch.bool:
        raise TypeError(f"targets must hold integer token ids, got {targets.dtype}")
    if targets.device != device:
        raise ValueError(f"targets is on {targets.device} but {beside} is on {device}; move them to one device")


def check_target_ids(targets: torch.Tensor, vocab_local: int, tp_group) -> None:
    """Every target is a GLOBAL id of the padded vocabulary ``[0, V_local * tp)``."""
    tp, _ = tp_world(tp_group)
    vocab = vocab_local * tp
    if targets.numel() and not is_fake(targets):
        # one read back to the host, not two: on a GPU each one drains the stream (docs/triton.md)
        low, high = torch.stack(torch.aminmax(targets)).tolist()
        if low < 0 or high >= vocab:
            bad = low if low < 0 else high
            raise ValueError(
                f"targets holds token id {bad}, outside the vocabulary [0, {vocab}) "
                f"(V_local={vocab_local} x tp={tp}); targets must be GLOBAL ids of the padded vocabulary"
            )


def validate_rows(rows, logits) -> int:
    """``rows`` (optional) selects unique logits rows to evaluate; returns how many rows are evaluated."""
    if rows is None:
        return logits.shape[0]
    if not isinstance(rows, torch.Tensor) or rows.dim() != 1 or rows.dtype != torch.long:
        raise ValueError("rows must be a 1-D int64 tensor of logits row indices (or None for every row)")
    if rows.numel() and not is_fake(rows):
        low, high = int(rows.min()), int(rows.max())
        if low < 0 or high >= logits.shape[0]:
            raise ValueError(f"rows holds index {low if low < 0 else high}, outside [0, {logits.shape[0]})")
        if rows.unique().numel() != rows.numel():
            raise ValueError("rows must not repeat a row index (each row's gradient is written once)")
    return rows.shape[0]


def validate_token_inputs(logits, targets, tp_group, chunk_size, temperature, rows=None) -> None:
    """The token-level Function's arguments (``impl.token_level``)."""
    check_matrix("logits", logits, "[rows, V_local]")
    evaluated = validate_rows(rows, logits)
    check_targets(targets, evaluated, "evaluated", "logits", logits.device)
    check_chunk_size(chunk_size)
    check_temperature(temperature)
    if logits.shape[1] == 0:
        raise ValueError("logits has an empty vocabulary shard (V_local == 0); every TP rank needs >= 1 column")
    check_target_ids(targets, logits.shape[1], tp_group)


def validate_hidden_inputs(hidden, weight, targets, tp_group, chunk_size, temperature) -> None:
    """The hidden-state path's arguments (``impl.hidden_states``)."""
    check_matrix("hidden", hidden, "[rows, H]")
    check_matrix("weight", weight, "[V_local, H]")
    if hidden.dtype != weight.dtype:
        raise TypeError(
            f"hidden is {hidden.dtype} but weight is {weight.dtype}: cast both to the LM head's matmul dtype"
        )
    if hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"hidden has H={hidden.shape[1]} but weight has H={weight.shape[1]}: weight must be this rank's "
            "LM-head shard [V_local, H] (not transposed)"
        )
    if hidden.shape[1] == 0:
        raise ValueError("hidden and weight have H == 0 (an empty hidden size): every logit would be 0")
    if weight.shape[0] == 0:
        raise ValueError(
            "weight has an empty vocabulary shard (V_local == 0); every TP rank needs >= 1 row of the head"
        )
    if hidden.device != weight.device:
        raise ValueError(f"hidden is on {hidden.device} but weight is on {weight.device}; move them to one device")
    check_targets(targets, hidden.shape[0], "hidden", "hidden", hidden.device)
    check_chunk_size(chunk_size)
    check_temperature(temperature)
    check_target_ids(targets, weight.shape[0], tp_group)
