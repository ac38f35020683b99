"""Per-sample response log-probs and entropy from a packed batch (no context parallelism).

A trainer hands over logits for a packed batch of prompt+response samples
(docs/math.md, "Packed batches" and "Layouts of the logits rows"). This module
turns the batch's lengths into row indices and targets, runs the fused
token-level Function once, and returns one vector per sample.

Index sets are computed from the batch's LENGTHS (Python integers), never
from tensor values (no ``nonzero`` / ``masked_select`` on the hot path), so
the code traces under fake tensors and its memory can be measured at real
scale. Loss masks are host-side metadata: on the loss-mask-only path their
0/1 pattern chooses the kept rows.

``response_only`` (slime PR #2076) gathers the consumed rows before the
softmax, so the ``[T', V]`` working set scales with the response tokens, not
the whole stream; values and gradients on consumed rows are those of the full
path, bit for bit, because every row is computed independently.
"""

from __future__ import annotations

from itertools import accumulate

import torch

from .batch import PackedBatch, PackedOutput
from .context_parallel import CP_MODES, agree_on_cp_call, cp_log_probs_and_entropy
from .token_level import log_probs_and_entropy as token_log_probs_and_entropy


def sample_offsets(batch: PackedBatch, rows: int) -> list[int]:
    """First logits row of each sample for this layout; checks ``rows`` fits it."""
    totals = batch.total_lengths
    if batch.qkv_format == "thd":
        if rows < sum(totals):
            raise ValueError(f"logits has {rows} rows but the packed samples need sum(total_lengths)={sum(totals)}")
        offsets, acc = [], 0
        for total in totals:
            offsets.append(acc)
            acc += total
        return offsets
    n = len(totals)
    if n == 0:
        return []
    seq_len, remainder = divmod(rows, n)
    if remainder or seq_len < max(totals):
        raise ValueError(
            f"bshd logits must have B*S rows with S >= max(total_lengths)={max(totals)}; got {rows} rows for B={n}"
        )
    return [i * seq_len for i in range(n)]


def response_rows(batch: PackedBatch, rows: int) -> torch.Tensor:
    """Global logits rows predicting each response token, samples in order.

    Row ``off_i + p`` predicts ``y_i[p + 1]``; the response is predicted by
    sample positions ``[P_i - 1, T_i - 1)``.
    """
    pieces = [
        torch.arange(offset + total - response - 1, offset + total - 1)
        for offset, total, response in zip(sample_offsets(batch, rows), batch.total_lengths, batch.response_lengths)
    ]
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.long)


def response_targets(batch: PackedBatch) -> torch.Tensor:
    """The response token ids ``y_i[P_i:T_i]``, samples concatenated."""
    pieces = [
        tokens[total - response :]
        for tokens, total, response in zip(batch.tokens, batch.total_lengths, batch.response_lengths)
    ]
    return torch.cat(pieces).long() if pieces else torch.zeros(0, dtype=torch.long)


def kept_positions(batch: PackedBatch) -> list[torch.Tensor]:
    """Per sample, the response positions whose loss mask is 1 (host-side metadata)."""
    if batch.loss_masks is None:
        return [torch.arange(response) for response in batch.response_lengths]
    return [torch.tensor([j for j, m in enumerate(mask.tolist()) if m], dtype=torch.long) for mask in batch.loss_masks]


def _scatter_back(values: torch.Tensor, kept: list[torch.Tensor], batch: PackedBatch) -> list:
    """Split compact per-row values into per-sample vectors; dropped positions read 0."""
    out, start = [], 0
    for positions, response in zip(kept, batch.response_lengths):
        piece = values[start : start + positions.numel()]
        start += positions.numel()
        if positions.numel() == response:
            out.append(piece)
        else:
            zeros = values.new_zeros(response)
            out.append(zeros.index_copy(0, positions.to(values.device), piece))
    return out


def flat_logits(logits: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """The stream's ``[rows, V_local]`` logits (bshd's ``[B, S, V_local]`` flattened, a view)."""
    if logits.dim() == 3:
        if batch.qkv_format != "bshd":
            raise ValueError("3-D logits [B, S, V_local] are only valid with qkv_format='bshd'")
        logits = logits.reshape(-1, logits.shape[-1])
    if logits.dim() != 2:
        raise ValueError(f"logits must be [rows, V_local] (or [B, S, V_local] for bshd), got {tuple(logits.shape)}")
    return logits


def log_probs_and_entropy(
    logits: torch.Tensor,
    batch: PackedBatch,
    *,
    tp_group=None,
    chunk_size: int | None = None,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    temperature: float = 1.0,
    response_only: bool = False,
    loss_mask_only: bool = False,
    cp_group=None,
    cp_mode: str = "none",
    caller_error: Exception | None = None,
) -> PackedOutput:
    """Per-sample response log-probs (and entropy) of a packed batch.

    Args:
        logits: ``[rows, V_local]`` (or ``[B, S, V_local]`` for bshd), this
            rank's vocabulary shard of the whole packed stream.
        batch: the samples' tokens, lengths, layout and loss masks.
        response_only: gather the consumed rows before the softmax.
        loss_mask_only: also drop loss-mask-0 response rows (they read 0 and
            get zero gradient); only valid with ``response_only``.
        cp_group, cp_mode: context parallelism (``"zigzag"`` or
            ``"allgather"``, see ``impl.context_parallel``); outputs are then
            this CP rank's zigzag view of each sample, and only the response
            rows are ever evaluated (``response_only`` is implied). Under a
            CP group of size > 1 the CP ranks first agree on the call's
            metadata (``impl.agreement``): disagreeing ranks all raise the
            same clear error instead of hanging.
        caller_error: an error the caller found on this rank (raised after
            the CP agreement, so the other CP ranks raise too).
        Other arguments as in ``impl.token_level.log_probs_and_entropy``.
    """
    options = dict(
        tp_group=tp_group,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
        temperature=temperature,
    )
    if cp_mode not in ("none", *CP_MODES):
        raise ValueError(f"cp_mode must be 'none' or one of {CP_MODES}, got {cp_mode!r}")
    agree_on_cp_call(
        logits,
        batch,
        cp_mode=cp_mode,
        cp_group=cp_group,
        loss_mask_only=loss_mask_only,
        options=options,
        caller_error=caller_error,
    )
    if cp_mode != "none":
        return cp_log_probs_and_entropy(
            logits, batch, cp_mode=cp_mode, cp_group=cp_group, loss_mask_only=loss_mask_only, options=options
        )
    if loss_mask_only and not response_only:
        raise ValueError("loss_mask_only=True requires response_only=True (it drops rows before the softmax)")
    logits = flat_logits(logits, batch)
    rows_index = response_rows(batch, logits.shape[0]).to(logits.device)
    targets = response_targets(batch).to(logits.device)

    if not response_only:
        stream_targets = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
        stream_targets[rows_index] = targets
        log_probs, entropy = token_log_probs_and_entropy(logits, stream_targets, **options)
        log_probs = log_probs.index_select(0, rows_index)
        entropy = entropy.index_select(0, rows_index) if entropy is not None else None
        kept = [torch.arange(response) for response in batch.response_lengths]
    else:
        kept = kept_positions(batch) if loss_mask_only else [torch.arange(r) for r in batch.response_lengths]
        if loss_mask_only:
            starts = accumulate(batch.response_lengths[:-1], initial=0)
            compact = torch.cat(
                [torch.zeros(0, dtype=torch.long)] + [positions + start for positions, start in zip(kept, starts)]
            )
            compact = compact.to(logits.device)
            rows_index, targets = rows_index[compact], targets[compact]
        log_probs, entropy = token_log_probs_and_entropy(logits, targets, rows=rows_index, **options)

    return PackedOutput(
        log_probs=_scatter_back(log_probs, kept, batch),
        entropy=_scatter_back(entropy, kept, batch) if entropy is not None else None,
    )
