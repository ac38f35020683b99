"""Log-probs and entropy of the processed (sampling) distribution over a kept set ``K`` (docs/sampling.md).

The engine samples from ``p~ = softmax(z)`` restricted to ``K`` and
renormalised over it; replaying that distribution in the trainer removes the
``log S`` bias of a full-vocabulary recomputation. This module takes ``K`` as
CSR of GLOBAL token ids (row ``r`` keeps ``ids[offsets[r]:offsets[r+1]]``,
vLLM's ``SamplingMask`` form) and never builds a ``[rows, V_local]`` mask: each
TP rank picks the ids that fall in its vocabulary shard, gathers just those
logits (``O(nnz)``, i.e. ``O(rows * k)``), and reduces them to the same per-row
statistics as the full-vocabulary path (``impl.row_stats``): one MAX
all-reduce of the kept row maxima and one all-gather of
``[sum exp, target shift, sum exp * shift, target kept]`` added in rank order.
The collective sequence depends on nothing but the call's options, so TP ranks
cannot diverge (docs/bugs.md #5). The backward issues no collective: the
gradient is zero outside ``K`` and is written only at the kept entries.

``K`` is a set: repeated ids in a row count once (the entries are sorted and
deduplicated, ``O(nnz log nnz)``). A target outside ``K`` is an error by default
(``on_outside="error"``: every rank raises the same ``ValueError``, since every
rank sees the summed "target kept" flag); ``"force_keep"`` adds it to ``K``
(slime's rule) and ``"neg_inf"`` returns ``-inf`` with a zero gradient
(NeMo-RL's). A row with no finite kept logit has no processed distribution: an
error on every rank. The inputs are never written.

``K`` derived from the logits (top-k, top-p, min-p as a GLOBAL rule over the
TP group) is built by ``impl.sampling_derive`` and fed to the same Function.
"""

from __future__ import annotations

import torch

from .agreement import TOKEN_CALL_FIXES, agree, token_call_fields
from .row_stats import (
    LOG_ZERO_FLOOR,
    all_reduce_max,
    backward_terms,
    chunk_bounds,
    finish,
    shard_targets,
    sum_in_rank_order,
    tp_world,
)
from .validation import is_fake, validate_token_inputs

ON_OUTSIDE = ("error", "force_keep", "neg_inf")
_S0, _TARGET, _S2, _KEPT = range(4)


def _check_integer_vector(name: str, tensor, device) -> None:
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1:
        got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"{name} must be a 1-D integer tensor, got {got}")
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise TypeError(f"{name} must hold integers (int64 or int32), got {tensor.dtype}")
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device} but logits is on {device}; move them to one device")


def validate_kept_csr(ids, offsets, rows: int, vocab: int, device) -> None:
    """The kept set as CSR: ``offsets`` has ``rows + 1`` non-decreasing entries from 0 to ``len(ids)``,
    every id a GLOBAL id of the padded vocabulary ``[0, vocab)``."""
    _check_integer_vector("kept_ids", ids, device)
    _check_integer_vector("kept_offsets", offsets, device)
    if offsets.shape[0] != rows + 1:
        raise ValueError(
            f"kept_offsets must have rows + 1 = {rows + 1} entries (one span per evaluated row), got {offsets.shape[0]}"
        )
    if is_fake(ids) or is_fake(offsets):
        return
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0 or last != ids.shape[0]:
        raise ValueError(f"kept_offsets must start at 0 and end at len(kept_ids) = {ids.shape[0]}, got {first}..{last}")
    if rows and bool((offsets[1:] < offsets[:-1]).any()):
        row = int((offsets[1:] < offsets[:-1]).nonzero()[0])
        raise ValueError(
            f"kept_offsets must be non-decreasing (row r keeps kept_ids[offsets[r]:offsets[r+1]]); "
            f"it decreases after row {row}"
        )
    if ids.numel():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocab:
            raise ValueError(
                f"kept_ids holds token id {low if low < 0 else high}, outside the vocabulary [0, {vocab}): "
                "kept ids must be GLOBAL ids of the padded vocabulary"
            )


def check_on_outside(on_outside) -> None:
    if on_outside not in ON_OUTSIDE:
        raise ValueError(
            f"on_outside must be one of {ON_OUTSIDE} (what a target outside the kept set gives), got {on_outside!r}"
        )


def csr_local_entries(ids: torch.Tensor, offsets: torch.Tensor, tp_rank: int, v_local: int) -> tuple:
    """``(rows, columns)`` of the kept entries on this rank's shard ``[tp_rank*v_local, (tp_rank+1)*v_local)``."""
    counts = offsets[1:] - offsets[:-1]
    rows = torch.arange(counts.shape[0], device=ids.device)
    row_of = torch.repeat_interleave(rows, counts.long(), output_size=ids.shape[0])
    local = ids.long() - tp_rank * v_local
    on_shard = (local >= 0) & (local < v_local)
    return row_of[on_shard], local[on_shard]


def unique_entries(rows: torch.Tensor, columns: torch.Tensor, v_local: int) -> tuple:
    """The entries as a set, sorted by (row, column): a repeated id counts once in every sum.

    A sorted key is a first occurrence where its leftmost position equals its
    own. Built without slices: under fake tensors (the memory checks at real
    scale) the entry count is data-dependent, and torch 2.11 gives each
    slice of such a length a size of its own, so comparing ``keys[1:]`` with
    ``keys[:-1]`` raised (two sizes it cannot prove equal;
    tests/test_impl_fake_trace.py). The boolean mask keeps the count bounded
    by the entries, which the tracker needs (``unique_consecutive``'s count
    has no bound there).
    """
    keys = torch.sort(rows * v_local + columns).values
    first = torch.searchsorted(keys, keys) == torch.arange(keys.shape[0], device=keys.device)
    keys = keys[first]
    return torch.div(keys, v_local, rounding_mode="floor"), keys % v_local


def _kept_values(logits, rows, columns, start: int, end: int, temperature: float) -> torch.Tensor:
    """``z = x / temperature`` at the kept entries ``start:end``, in a private fp32 vector."""
    values = logits[rows[start:end], columns[start:end]].float()
    return values if temperature == 1.0 else values.div_(temperature)


def _entry_bounds(rows: torch.Tensor, count: int, chunk_size) -> list:
    """Entry ranges of the row chunks (entries are sorted by row).

    Fake tensors (the memory checks at real scale) have no values to split
    on: they run as one chunk, which over-estimates the peak, never under.
    """
    row_bounds = chunk_bounds(count, chunk_size)
    if len(row_bounds) == 1 or is_fake(rows):
        return [(0, rows.shape[0])]
    starts = torch.tensor([start for start, _ in row_bounds] + [count], device=rows.device)
    edges = torch.searchsorted(rows, starts).tolist()
    return list(zip(edges[:-1], edges[1:]))


def _is_target(rows, columns, in_shard, local_targets, start: int, end: int) -> torch.Tensor:
    r = rows[start:end]
    return in_shard[r] & (columns[start:end] == local_targets[r])


def _outside_error(kept: torch.Tensor) -> ValueError:
    bad = (kept == 0).nonzero().flatten()[:8].tolist()
    return ValueError(
        f"targets outside the kept set in rows {bad}: the recorded kept set must contain the sampled token; "
        "pass on_outside='force_keep' (slime's rule) or 'neg_inf' to accept it"
    )


class KeptSetLogProbEntropy(torch.autograd.Function):
    """``(log_probs, entropy)`` of ``softmax(z)`` restricted to the kept entries (see the module docstring)."""

    @staticmethod
    def forward(
        ctx, logits, targets, rows, columns, tp_group, chunk_size, with_entropy, entropy_grad, temperature, on_outside
    ):
        count, v_local = targets.shape[0], logits.shape[1]
        _, tp_rank = tp_world(tp_group)
        in_shard, local_targets = shard_targets(targets, tp_rank, v_local)
        local_targets = local_targets.squeeze(1)
        bounds = _entry_bounds(rows, count, chunk_size)

        row_max = torch.full((count,), float("-inf"), dtype=torch.float32, device=logits.device)
        for start, end in bounds:
            z = _kept_values(logits, rows, columns, start, end, temperature)
            row_max.scatter_reduce_(0, rows[start:end], z, reduce="amax")
        all_reduce_max(row_max, tp_group)
        # A row whose kept logits are all -inf has no distribution (an error below); 0 keeps its sums NaN-free.
        shift = torch.where(torch.isfinite(row_max), row_max, 0.0)

        stats = torch.zeros(count, 4, dtype=torch.float32, device=logits.device)
        for start, end in bounds:
            r = rows[start:end]
            shifted = _kept_values(logits, rows, columns, start, end, temperature).sub_(shift[r])
            is_target = _is_target(rows, columns, in_shard, local_targets, start, end)
            probs = shifted.exp()
            stats[:, _S0].index_add_(0, r, probs)
            stats[:, _TARGET].index_add_(0, r, torch.where(is_target, shifted, 0.0))
            # out of place: torch 2.11's fake tensors cannot trace a unary in-place op on a data-dependent length
            stats[:, _S2].index_add_(0, r, shifted.clamp(min=LOG_ZERO_FLOOR).mul_(probs))
            stats[:, _KEPT].index_add_(0, r, is_target.float())
        stats = sum_in_rank_order(stats, tp_group)

        if not is_fake(stats):
            empty = stats[:, _S0] == 0
            if bool(empty.any()):
                raise ValueError(
                    f"the kept set has no finite logit in rows {empty.nonzero().flatten()[:8].tolist()}: "
                    "the processed distribution is undefined there (an empty span, or only -inf logits kept)"
                )
            if on_outside == "error" and bool((stats[:, _KEPT] == 0).any()):
                raise _outside_error(stats[:, _KEPT])
        log_probs, entropy = finish(stats[:, :3], True)
        # A target outside K: "error" raised above and "force_keep" made it an entry, so only "neg_inf" rows remain.
        log_probs = torch.where(stats[:, _KEPT] == 0, float("-inf"), log_probs)
        if not with_entropy:
            entropy = None

        ctx.save_for_backward(logits, targets, rows, columns, row_max, stats)
        ctx.chunk_size, ctx.temperature, ctx.tp_rank = chunk_size, temperature, tp_rank
        if with_entropy and not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        logits, targets, rows, columns, row_max, stats = ctx.saved_tensors
        shift, g_lp, g_h, entropy = backward_terms(stats[:, :3], row_max, grad_log_probs, grad_entropy)
        # A target outside K (neg_inf rows) has a constant -inf log-prob: no gradient from it.
        g_lp = torch.where(stats[:, _KEPT] == 0, 0.0, g_lp)
        count, v_local = targets.shape[0], logits.shape[1]
        in_shard, local_targets = shard_targets(targets, ctx.tp_rank, v_local)
        local_targets = local_targets.squeeze(1)
        grad_logits = torch.zeros_like(logits)
        for start, end in _entry_bounds(rows, count, ctx.chunk_size):
            r, c = rows[start:end], columns[start:end]
            log_p = _kept_values(logits, rows, columns, start, end, ctx.temperature).sub_(shift[r])
            probs = log_p.exp()
            # dL/dz = g_lp (1[v=t] - p) - g_H p (log p + H)   on K (docs/sampling.md), 0 elsewhere
            coef = g_lp[r]
            if entropy is not None:
                coef = coef + g_h[r] * (log_p.clamp(min=LOG_ZERO_FLOOR) + entropy[r])
            grad = torch.where(_is_target(rows, columns, in_shard, local_targets, start, end), g_lp[r], 0.0)
            grad = grad.sub_(probs.mul_(coef))
            if ctx.temperature != 1.0:
                grad = grad.div_(ctx.temperature)
            grad_logits.index_put_((r, c), grad.to(grad_logits.dtype))
        return grad_logits, None, None, None, None, None, None, None, None, None


def call_fields(logits, targets, chunk_size, with_entropy, entropy_grad, temperature, **options) -> dict:
    """The token call's agreement fields plus the sampling options every TP rank must share."""
    fields = token_call_fields(logits, None, chunk_size, with_entropy, entropy_grad, temperature)
    fields["evaluated rows"] = int(targets.shape[0]) if isinstance(targets, torch.Tensor) and targets.dim() else -1
    for name, value in options.items():
        fields[name] = value if value is None or isinstance(value, (bool, int, float)) else repr(value)
    return fields


SAMPLING_FIXES = {
    **TOKEN_CALL_FIXES,
    "on_outside": "every TP rank must apply the same rule to a target outside the kept set",
}


def agree_on_sampling_call(
    logits, targets, tp_group, chunk_size, with_entropy, entropy_grad, temperature, validate_kept, **options
) -> None:
    """Validate this rank's sampling call, then agree over the TP group: every rank raises the same clear error.

    ``validate_kept`` checks the kept set's own form (raising ``ValueError`` / ``TypeError``); ``options``
    (``on_outside`` and any sampling parameter) are fields every TP rank must share.
    """
    local_error = None
    try:
        validate_token_inputs(logits, targets, tp_group, chunk_size, temperature)
        check_on_outside(options["on_outside"])
        validate_kept()
    except (ValueError, TypeError) as exc:
        local_error = exc
    agree(
        tp_group,
        "tp_group",
        call_fields(logits, targets, chunk_size, with_entropy, entropy_grad, temperature, **options),
        local_error=local_error,
        device=logits.device if isinstance(logits, torch.Tensor) else "cpu",
        fix=SAMPLING_FIXES,
    )


def _validate_kept_mask(kept_mask, logits) -> None:
    if not isinstance(kept_mask, torch.Tensor) or kept_mask.dtype != torch.bool or kept_mask.shape != logits.shape:
        got = (kept_mask.dtype, tuple(kept_mask.shape)) if isinstance(kept_mask, torch.Tensor) else type(kept_mask)
        raise ValueError(
            f"kept_mask must be a bool tensor shaped like this rank's logits {tuple(logits.shape)}, got {got}"
        )
    if kept_mask.device != logits.device:
        raise ValueError(f"kept_mask is on {kept_mask.device} but logits is on {logits.device}")


def kept_log_probs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    kept_ids: torch.Tensor,
    kept_offsets: torch.Tensor,
    *,
    tp_group=None,
    chunk_size: int | None = None,
    with_entropy: bool = True,
    entropy_grad: bool = True,
    temperature: float = 1.0,
    on_outside: str = "error",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of ``targets`` and entropy of the processed distribution over the kept set ``K``.

    Args:
        logits: ``[rows, V_local]`` float32/bfloat16/float16, this rank's
            contiguous vocabulary shard ``[rank*V_local, (rank+1)*V_local)``.
        targets: ``[rows]`` integer GLOBAL token ids (the sampled tokens).
        kept_ids, kept_offsets: ``K`` as CSR of GLOBAL ids, the same on every
            TP rank: row ``r`` keeps ``kept_ids[kept_offsets[r]:kept_offsets[r+1]]``.
        tp_group: the tensor-parallel process group; ``None`` means one rank.
        chunk_size: rows per chunk of the passes over the kept entries.
        with_entropy: compute the entropy over ``K`` (else None is returned).
        entropy_grad: when False the entropy is returned without a graph.
        temperature: ``z = logits / temperature`` (the engine's temperature).
        on_outside: a target outside ``K``: ``"error"``, ``"force_keep"`` (``K ∪ {t}``)
            or ``"neg_inf"`` (``-inf``, gradient 0).

    Extra memory beyond the gradient is ``O(nnz)`` (the kept entries this rank
    holds): no ``[rows, V_local]`` mask or working buffer is built.

    Returns:
        ``(log_probs, entropy)``, float32, one entry per row (entropy may be None).
    """
    agree_on_sampling_call(
        logits,
        targets,
        tp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        lambda: validate_kept_csr(
            kept_ids, kept_offsets, targets.shape[0], logits.shape[1] * tp_world(tp_group)[0], logits.device
        ),
        on_outside=on_outside,
    )
    _, tp_rank = tp_world(tp_group)
    v_local = logits.shape[1]
    rows, columns = csr_local_entries(kept_ids, kept_offsets, tp_rank, v_local)
    return kept_entries_log_probs(
        logits, targets, rows, columns, tp_group, chunk_size, with_entropy, entropy_grad, temperature, on_outside
    )


def dense_log_probs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    kept_mask: torch.Tensor,
    *,
    tp_group=None,
    chunk_size: int | None = None,
    with_entropy: bool = True,
    entropy_grad: bool = True,
    temperature: float = 1.0,
    on_outside: str = "error",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """As ``kept_log_probs_and_entropy``, with ``K`` given as this rank's bool ``[rows, V_local]`` keep mask.

    For callers that already hold slime's dense form: the mask is read once
    (its nonzero entries) and the same entry-level Function runs; nothing
    else of ``[rows, V_local]`` size is built.
    """
    agree_on_sampling_call(
        logits,
        targets,
        tp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        lambda: _validate_kept_mask(kept_mask, logits),
        on_outside=on_outside,
    )
    entries = kept_mask.nonzero()
    return kept_entries_log_probs(
        logits,
        targets,
        entries[:, 0],
        entries[:, 1],
        tp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        on_outside,
    )


def kept_entries_log_probs(
    logits, targets, rows, columns, tp_group, chunk_size, with_entropy, entropy_grad, temperature, on_outside
):
    """The Function on this rank's kept entries ``(rows, columns)`` (validated, agreed inputs)."""
    if on_outside == "force_keep":
        _, tp_rank = tp_world(tp_group)
        in_shard, local_targets = shard_targets(targets.long(), tp_rank, logits.shape[1])
        own = in_shard.nonzero().flatten()
        rows = torch.cat([rows, own])
        columns = torch.cat([columns, local_targets.squeeze(1)[own]])
    rows, columns = unique_entries(rows, columns, logits.shape[1])
    return KeptSetLogProbEntropy.apply(
        logits,
        targets.long(),
        rows,
        columns,
        tp_group,
        chunk_size,
        bool(with_entropy),
        bool(entropy_grad),
        float(temperature),
        on_outside,
    )
