"""Per-sample log-probs and entropy of the processed distribution from a packed batch, with context parallelism.

The packed counterpart of ``impl.sampling`` / ``impl.sampling_derive``, as
``impl.packed`` is of ``impl.token_level``: the batch's lengths give this
rank's response rows and their targets (the same plans as the packed path,
``impl.context_parallel``), those rows are picked out of the logits, and the
token-level sampling function runs on them once. Only response rows are ever
evaluated (a kept set exists for sampled tokens only); every other row gets a
zero gradient.

Which rows the kept set describes (docs/sampling.md, "impl's sampling path",
packed batches and CP): ONE ROW PER RESPONSE ROW THIS RANK'S LOGITS HOLD, in
the order of those rows. The kept set travels with the logits rows, like any
per-row data a trainer slices for its CP rank:

* no CP: every response token, samples in order;
* zigzag: the rank's two chunks of each sample, which are also the positions it returns;
* allgather: the response rows of the rank's contiguous slice of the stream,
  in stream order (NOT its zigzag view: the rank evaluates the rows it holds
  and the values reach their view by the packed path's one CP all-reduce).

A CSR's ``kept_ids[kept_offsets[r]:kept_offsets[r+1]]`` and a dense mask's
row ``r`` are the ``r``-th of those rows. Errors a rank meets in its row
plan or the sampling call (a target outside ``K`` under ``on_outside="error"``,
a kept set of the wrong length) are agreed over the CP group before any further CP collective:
a CP rank holding no offending row raises too, instead of returning values
(zigzag) or waiting in the all-reduce its peer never reaches (allgather).
"""

from __future__ import annotations

import torch

from .agreement import agree
from .batch import PackedBatch, PackedOutput
from .context_parallel import (
    CP_MODES,
    agree_on_cp_call,
    allgather_plan,
    redistribute,
    zigzag_plan,
)
from .packed import flat_logits, response_rows, response_targets
from .sampling import dense_log_probs_and_entropy, kept_log_probs_and_entropy
from .sampling_derive import sampled_log_probs_and_entropy


def kept_set_log_probs(
    logits, targets, *, kept_ids=None, kept_offsets=None, kept_mask=None, top_k=None, top_p=None, min_p=None, **options
):
    """The token-level sampling call for whichever form ``K`` comes in: CSR, a dense mask, or parameters."""
    given = [name for name, value in (("kept_ids", kept_ids), ("kept_mask", kept_mask)) if value is not None]
    derived = any(value is not None for value in (top_k, top_p, min_p))
    if len(given) + derived > 1 or (kept_ids is None) != (kept_offsets is None):
        raise ValueError(
            "pass the kept set in exactly one form: kept_ids with kept_offsets (CSR), kept_mask (dense), "
            f"or top_k / top_p / min_p (derived); got {given + (['sampling parameters'] if derived else [])}"
        )
    if kept_ids is not None:
        return kept_log_probs_and_entropy(logits, targets, kept_ids, kept_offsets, **options)
    if kept_mask is not None:
        return dense_log_probs_and_entropy(logits, targets, kept_mask, **options)
    return sampled_log_probs_and_entropy(logits, targets, top_k=top_k, top_p=top_p, min_p=min_p, **options)


def _plan(logits, batch: PackedBatch, cp_mode: str, cp_group) -> tuple:
    """``(logits rows, their targets, to_samples)``; ``to_samples`` makes per-sample outputs of row values."""
    if cp_mode == "zigzag":
        rows, targets, sizes = zigzag_plan(logits, batch, cp_group)
        return rows, targets, lambda values: None if values is None else list(torch.split(values, sizes))
    if cp_mode == "allgather":
        rows, targets, held = allgather_plan(logits, batch, cp_group)
        return rows, targets, lambda values: redistribute(values, held, batch, cp_group)
    rows = response_rows(batch, logits.shape[0]).tolist()
    sizes = list(batch.response_lengths)
    return rows, response_targets(batch).to(logits.device), lambda v: None if v is None else list(torch.split(v, sizes))


def packed_sampling_log_probs_and_entropy(
    logits: torch.Tensor,
    batch: PackedBatch,
    *,
    kept_ids: torch.Tensor | None = None,
    kept_offsets: torch.Tensor | None = None,
    kept_mask: torch.Tensor | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    tp_group=None,
    cp_group=None,
    cp_mode: str = "none",
    chunk_size: int | None = None,
    with_entropy: bool = True,
    entropy_grad: bool = True,
    temperature: float = 1.0,
    on_outside: str = "error",
) -> PackedOutput:
    """Per-sample response log-probs (and entropy) over the kept set ``K`` of each response token.

    Args:
        logits: as ``impl.packed.log_probs_and_entropy`` (this rank's CP rows of its vocabulary shard).
        batch: the samples; their response tokens are the sampled tokens.
        kept_ids, kept_offsets / kept_mask / top_k, top_p, min_p: ``K`` in one
            form, one row per response row this rank holds (module docstring).
        cp_group, cp_mode: context parallelism as in ``impl.packed``; outputs
            are this CP rank's zigzag view of each sample.
        Other arguments as in ``impl.sampling.kept_log_probs_and_entropy``.
    """
    options = dict(
        tp_group=tp_group,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
        temperature=temperature,
        on_outside=on_outside,
    )
    if cp_mode not in ("none", *CP_MODES):
        raise ValueError(f"cp_mode must be 'none' or one of {CP_MODES}, got {cp_mode!r}")
    agree_on_cp_call(logits, batch, cp_mode=cp_mode, cp_group=cp_group, loss_mask_only=False, options=options)
    kept = dict(kept_ids=kept_ids, kept_offsets=kept_offsets, kept_mask=kept_mask)
    kept.update(top_k=top_k, top_p=top_p, min_p=min_p)
    device, error = logits.device, None
    try:
        logits = flat_logits(logits, batch)
        rows, targets, to_samples = _plan(logits, batch, cp_mode, cp_group)
        picked = logits.index_select(0, torch.tensor(rows, dtype=torch.long, device=device))
        log_probs, entropy = kept_set_log_probs(picked, targets, **kept, **options)
    except (ValueError, TypeError) as exc:
        error = exc
    # one rank's error is every CP rank's (size 1: simply raised)
    agree(cp_group, "cp_group", {}, local_error=error, device=device, fix={})
    return PackedOutput(to_samples(log_probs), to_samples(entropy))
