"""Context parallelism for the packed path: zigzag and allgather layouts (docs/math.md).

Both layouts hand back, on every CP rank, the ZIGZAG VIEW of each sample's
response: with ``c_i = ceil(T_i / (2 cp))``, CP rank ``r`` returns the
values whose predicting row (sample position ``p`` in ``[P_i - 1, T_i - 1)``)
lies in chunk ``r`` and then in chunk ``2 cp - 1 - r`` of that sample.

* zigzag: the rank already holds exactly those rows (ring-attention
  sharding), so it evaluates them in place; no CP collective at all.
* allgather: the rank holds a contiguous slice of the packed stream. It
  evaluates the response rows it holds, places them in one zero vector of all
  samples' response positions, and a SINGLE all-reduce over the CP group
  makes the full vector available everywhere; each rank then slices its
  zigzag view. The all-reduce is the differentiable one exactly when the
  values carry a graph, and that is decided by the configuration (the
  entropy-gradient gate), never by which rank happens to hold rows: every
  rank builds its contribution the same way, a rank with no rows included,
  so ``requires_grad`` and the collective sequence are identical on all
  ranks (docs/bugs.md #4 and #5: ``requires_grad=True`` zeros on the ranks that
  held nothing re-enabled the gradient on some ranks only and hung training).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

from .agreement import agree
from .batch import PackedBatch, PackedOutput
from .row_stats import tp_world
from .token_level import log_probs_and_entropy as token_log_probs_and_entropy

CP_MODES = ("zigzag", "allgather")


def zigzag_chunk(total: int, cp: int) -> int:
    """Chunk length ``c_i = ceil(T_i / (2 cp))`` of a sample under zigzag sharding."""
    return math.ceil(total / (2 * cp))


def zigzag_positions(total: int, response: int, cp: int, cp_rank: int) -> list[int]:
    """Response indices ``j`` (position ``p = P - 1 + j``) that CP rank ``cp_rank`` returns, in view order."""
    chunk, first = zigzag_chunk(total, cp), total - response - 1
    out = []
    for k in (cp_rank, 2 * cp - 1 - cp_rank):
        start, end = max(first, k * chunk), min(total - 1, (k + 1) * chunk)
        out.extend(p - first for p in range(start, end))
    return out


def zigzag_local_rows(batch: PackedBatch, cp: int, cp_rank: int) -> tuple[list[list[int]], int]:
    """Per sample, the LOCAL row of each returned position on this rank; and the rows the layout needs."""
    rows, offset = [], 0
    for total, response in zip(batch.total_lengths, batch.response_lengths):
        chunk, first = zigzag_chunk(total, cp), total - response - 1
        sample_rows = []
        for slot, k in enumerate((cp_rank, 2 * cp - 1 - cp_rank)):
            start, end = max(first, k * chunk), min(total - 1, (k + 1) * chunk)
            sample_rows.extend(offset + slot * chunk + (p - k * chunk) for p in range(start, end))
        rows.append(sample_rows)
        offset += 2 * chunk
    return rows, offset


def allgather_piece(batch: PackedBatch, rows_local: int, cp_rank: int) -> tuple[list[list[int]], list[list[int]]]:
    """Per sample, (response indices held by this rank, their local rows) for a contiguous slice."""
    start_row = cp_rank * rows_local
    held, local, offset = [], [], 0
    for total, response in zip(batch.total_lengths, batch.response_lengths):
        first = total - response - 1
        sample_held, sample_local = [], []
        for j in range(response):
            row = offset + first + j
            if start_row <= row < start_row + rows_local:
                sample_held.append(j)
                sample_local.append(row - start_row)
        held.append(sample_held)
        local.append(sample_local)
        offset += total
    return held, local


def _cp_world(group) -> tuple[int, int]:
    return tp_world(group)


CP_CALL_FIXES = {
    "cp_mode": "every rank of cp_group must use the same context-parallel layout",
    "logits rows (this rank's share of the packed stream)": "every CP rank holds the same number of rows: for "
    "allgather pad the packed stream to a multiple of cp * pad_multiple; for zigzag each rank holds "
    "2*ceil(T_i/(2*cp)) rows per sample",
    "total_lengths": "pass every CP rank the WHOLE packed batch's lengths (the same list on every rank)",
    "response_lengths": "pass every CP rank the WHOLE packed batch's lengths (the same list on every rank)",
    "qkv_format": "every CP rank must use the same packing",
    "logits dtype": "every CP rank must pass logits of the same dtype",
}


def cp_call_fields(logits, batch: PackedBatch, cp_mode: str, options: dict) -> dict:
    """What every CP rank of one packed call must agree on (computed defensively: the inputs may be invalid)."""
    shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else ()
    temperature, chunk_size = options["temperature"], options["chunk_size"]
    return {
        "cp_mode": cp_mode,
        "qkv_format": batch.qkv_format,
        "total_lengths": list(batch.total_lengths),
        "response_lengths": list(batch.response_lengths),
        "logits rows (this rank's share of the packed stream)": shape[0] if shape else -1,
        "V_local (the vocabulary shard width)": shape[-1] if shape else -1,
        "logits dtype": str(logits.dtype) if isinstance(logits, torch.Tensor) else "?",
        "chunk_size": chunk_size if chunk_size is None or isinstance(chunk_size, int) else repr(chunk_size),
        "with_entropy": bool(options["with_entropy"]),
        "entropy_grad": bool(options["entropy_grad"]),
        "temperature": float(temperature) if isinstance(temperature, (int, float)) else repr(temperature),
    }


def agree_on_cp_call(logits, batch: PackedBatch, *, cp_mode, cp_group, loss_mask_only, options, caller_error=None):
    """Before any other collective, the ranks of ``cp_group`` agree on the call or all raise the same error.

    ``caller_error`` is an error the caller found in its own arguments on
    this rank (e.g. the policy loss's advantages): raised after the
    agreement, so that this rank's peers raise too instead of waiting for it.
    Also: a CP group of size > 1 needs a CP mode, a CP mode needs one.
    """
    cp = _cp_world(cp_group)[0]
    if cp == 1:
        if caller_error is not None:
            raise caller_error
        if cp_mode != "none":
            _validate(logits, batch, cp_mode, loss_mask_only)
            given = "None" if cp_group is None else "a group of size 1"
            raise ValueError(
                f"cp_mode={cp_mode!r} needs a context-parallel cp_group of size > 1 (got {given}): pass the CP "
                "group, or cp_mode='none' without context parallelism"
            )
        return
    local_error = caller_error
    if local_error is None and cp_mode != "none":
        try:
            _validate(logits, batch, cp_mode, loss_mask_only)
        except (ValueError, TypeError) as exc:
            local_error = exc
    device = logits.device if isinstance(logits, torch.Tensor) else "cpu"
    fields = cp_call_fields(logits, batch, cp_mode, options)
    agree(cp_group, "cp_group", fields, local_error=local_error, device=device, fix=CP_CALL_FIXES)
    if cp_mode == "none":
        raise ValueError("a CP group of size > 1 was given with cp_mode='none'; pass cp_mode='zigzag' or 'allgather'")


def _validate(logits, batch: PackedBatch, cp_mode: str, loss_mask_only: bool) -> None:
    if cp_mode not in CP_MODES:
        raise ValueError(f"cp_mode must be one of {CP_MODES}, got {cp_mode!r}")
    if batch.qkv_format != "thd":
        raise ValueError(
            f"cp_mode={cp_mode!r} needs qkv_format='thd' (got {batch.qkv_format!r}): context parallelism "
            "splits the packed stream; configure thd packing or disable context parallelism"
        )
    if logits.dim() != 2:
        raise ValueError(f"logits must be [rows, V_local] for context parallelism, got {tuple(logits.shape)}")
    if loss_mask_only:
        raise ValueError("loss_mask_only is not supported with context parallelism; use response_only=False")


def _evaluate(logits, rows: list[int], targets: torch.Tensor, options: dict):
    index = torch.tensor(rows, dtype=torch.long, device=logits.device)
    return token_log_probs_and_entropy(logits, targets.to(logits.device), rows=index, **options)


def _response_targets_by_sample(batch: PackedBatch) -> list[torch.Tensor]:
    return [
        tokens[total - response :].long()
        for tokens, total, response in zip(batch.tokens, batch.total_lengths, batch.response_lengths)
    ]


def _split(values: torch.Tensor | None, sizes: list[int]):
    return None if values is None else list(torch.split(values, sizes))


def zigzag_plan(logits, batch: PackedBatch, cp_group) -> tuple:
    """``(local rows, their targets, values per sample)``: the rows this rank holds are the ones it returns."""
    cp, cp_rank = _cp_world(cp_group)
    rows, needed = zigzag_local_rows(batch, cp, cp_rank)
    if logits.shape[0] < needed:
        raise ValueError(
            f"zigzag logits has {logits.shape[0]} rows; this rank's chunks need {needed} "
            f"(sum of 2*ceil(T_i/(2*cp)) with cp={cp})"
        )
    targets = _response_targets_by_sample(batch)
    picked = [
        t[zigzag_positions(total, response, cp, cp_rank)]
        for t, total, response in zip(targets, batch.total_lengths, batch.response_lengths)
    ]
    flat_rows = [row for sample_rows in rows for row in sample_rows]
    flat_targets = torch.cat(
        [torch.zeros(0, dtype=torch.long, device=logits.device)] + [t.to(logits.device) for t in picked]
    )
    return flat_rows, flat_targets, [len(r) for r in rows]


def zigzag_log_probs_and_entropy(logits, batch: PackedBatch, *, cp_group, options: dict) -> PackedOutput:
    flat_rows, flat_targets, sizes = zigzag_plan(logits, batch, cp_group)
    log_probs, entropy = _evaluate(logits, flat_rows, flat_targets, options)
    return PackedOutput(_split(log_probs, sizes), _split(entropy, sizes))


def _all_reduce_sum(values: torch.Tensor, cp_group) -> torch.Tensor:
    """Sum over the CP group; differentiable iff ``values`` carries a graph (the same on every rank)."""
    if values.requires_grad:
        return dist_nn.all_reduce(values, op=dist.ReduceOp.SUM, group=cp_group)
    values = values.clone()
    dist.all_reduce(values, op=dist.ReduceOp.SUM, group=cp_group)
    return values


def _redistribute(values, held_flat: torch.Tensor, batch: PackedBatch, cp: int, cp_rank: int, cp_group):
    """Place this rank's values in a zero vector of every response position, sum over CP, take the zigzag view."""
    total_responses = sum(batch.response_lengths)
    full = values.new_zeros(total_responses).index_copy(0, held_flat.to(values.device), values)
    full = _all_reduce_sum(full, cp_group)
    out, start = [], 0
    for total, response in zip(batch.total_lengths, batch.response_lengths):
        view = torch.tensor(zigzag_positions(total, response, cp, cp_rank), dtype=torch.long, device=values.device)
        out.append(full[start : start + response].index_select(0, view))
        start += response
    return out


def allgather_plan(logits, batch: PackedBatch, cp_group) -> tuple:
    """``(local rows, their targets, their response positions)``: the response rows of this rank's slice.

    The positions index all samples' response tokens concatenated; ``redistribute`` turns values at
    them into this rank's zigzag view.
    """
    # Equal slices on every CP rank were agreed on before (``agree_on_cp_call``, "logits rows").
    cp, cp_rank = _cp_world(cp_group)
    if logits.shape[0] * cp < sum(batch.total_lengths):
        raise ValueError(
            f"allgather CP: {cp} slices of {logits.shape[0]} rows cannot hold "
            f"sum(total_lengths)={sum(batch.total_lengths)} tokens"
        )
    held, local = allgather_piece(batch, logits.shape[0], cp_rank)
    targets = _response_targets_by_sample(batch)
    starts = [sum(batch.response_lengths[:i]) for i in range(len(batch.response_lengths))]
    held_flat = torch.tensor([start + j for start, sample in zip(starts, held) for j in sample], dtype=torch.long)
    flat_targets = torch.cat(
        [torch.zeros(0, dtype=torch.long, device=logits.device)]
        + [t[h].to(logits.device) for t, h in zip(targets, held)]
    )
    return [row for rows in local for row in rows], flat_targets, held_flat


def redistribute(values, held_flat: torch.Tensor, batch: PackedBatch, cp_group):
    """This rank's values at ``held_flat`` as its zigzag view of every sample (None stays None)."""
    if values is None:
        return None
    cp, cp_rank = _cp_world(cp_group)
    return _redistribute(values, held_flat, batch, cp, cp_rank, cp_group)


def allgather_log_probs_and_entropy(logits, batch: PackedBatch, *, cp_group, options: dict) -> PackedOutput:
    flat_rows, flat_targets, held_flat = allgather_plan(logits, batch, cp_group)
    log_probs, entropy = _evaluate(logits, flat_rows, flat_targets, options)
    return PackedOutput(
        redistribute(log_probs, held_flat, batch, cp_group), redistribute(entropy, held_flat, batch, cp_group)
    )


def cp_log_probs_and_entropy(
    logits, batch: PackedBatch, *, cp_mode: str, cp_group, loss_mask_only: bool, options: dict
) -> PackedOutput:
    """Per-sample outputs in the zigzag view on every CP rank (module docstring).

    ``options`` are the token-level Function's keyword arguments (TP group,
    chunk size, entropy flags, temperature), passed through unchanged.
    """
    _validate(logits, batch, cp_mode, loss_mask_only)
    if cp_mode == "zigzag":
        return zigzag_log_probs_and_entropy(logits, batch, cp_group=cp_group, options=options)
    return allgather_log_probs_and_entropy(logits, batch, cp_group=cp_group, options=options)


__all__ = [
    "CP_MODES",
    "agree_on_cp_call",
    "allgather_plan",
    "cp_log_probs_and_entropy",
    "redistribute",
    "zigzag_plan",
    "zigzag_positions",
]
