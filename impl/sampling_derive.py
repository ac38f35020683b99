"""The kept set derived from the logits as vLLM's sampler does, as a GLOBAL rule over the TP group.

docs/sampling.md ("Derived from the logits", "Tensor parallelism"): with
``z = x / temperature``, min-p keeps ``exp(z - max z) >= min_p``, top-k keeps
every value at least the k-th largest (ties: all copies), top-p keeps the
shortest descending prefix of the survivors, renormalised, whose mass reaches
``p`` (the crossing value kept with all its copies). Every rule reads the
WHOLE row: a per-shard rule keeps a larger, sharding-dependent set. So, per
chunk of rows:

* the global row max is one MAX all-reduce (min-p, and the shift of top-p's masses);
* the global k-th value comes from an all-gather of each rank's local top
  ``min(k, V_local)`` values (the global top-k lies in their union);
* top-p needs the global order of the survivors and their total mass: the
  mass is a rank-ordered sum, the order comes from the same gathered values.
  Every value above the k-th is among them; without top-k the candidates are
  the chunk's whole rows (``[chunk, V]`` float64 per chunk: what NeMo-RL's
  all-to-all to full rows costs too);
* each rank then keeps its own columns at or above the row's threshold.

The collective sequence depends on the options and the chunking only, never on
the data. The thresholds are computed in float64 from the same values the
oracle uses, so only masses within float64 rounding of ``p`` can differ from it.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .row_stats import all_reduce_max, chunk_bounds, sum_in_rank_order, tp_world
from .sampling import agree_on_sampling_call, kept_entries_log_probs


def check_sampling_params(top_k, top_p, min_p) -> None:
    """Engines' "off" spellings (top_k 0 / -1, top_p 1, min_p 0) are None here, or the no-op values 1 and 0."""
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0):
        raise ValueError(f"top_k must be an int >= 1 (None disables top-k), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be a number in (0, 1] (None or 1 disables top-p), got {top_p!r}")
    if min_p is not None and (isinstance(min_p, bool) or not isinstance(min_p, (int, float)) or not 0 <= min_p <= 1):
        raise ValueError(f"min_p must be a number in [0, 1] (None or 0 disables min-p), got {min_p!r}")


def gather_candidates(local: torch.Tensor, group) -> torch.Tensor:
    """Every rank's candidate values of each row side by side: ``[rows, tp * c]``, in rank order."""
    size, _ = tp_world(group)
    if size == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(size)]
    dist.all_gather(parts, local.contiguous(), group=group)
    return torch.cat(parts, dim=1)


def _top_p_threshold(candidates, theta_k, row_max, mass, top_p) -> torch.Tensor:
    """The smallest candidate value whose strictly-larger survivors hold mass ``< top_p`` (ties all kept)."""
    values = torch.sort(candidates, dim=1, descending=True).values
    survives = torch.isfinite(values) & (values >= theta_k[:, None])
    weights = torch.where(survives, (values - row_max[:, None]).exp() / mass[:, None], 0.0)
    before = torch.cumsum(weights, dim=1) - weights
    # the mass strictly above a value is the exclusive sum at the first copy of it
    first = torch.searchsorted((-values).contiguous(), (-values).contiguous(), right=False)
    above = before.gather(1, first.clamp(max=values.shape[1] - 1))
    keep = survives & (above < top_p)
    return torch.where(keep, values, math.inf).amin(dim=1)


def derived_local_entries(logits, tp_group, chunk_size, temperature, top_k, top_p, min_p) -> tuple:
    """``(rows, columns)`` of this rank's share of the derived kept set (see the module docstring)."""
    count, v_local = logits.shape
    size, _ = tp_world(tp_group)
    row_max = logits.amax(dim=1).double() / temperature if count else logits.new_zeros(0, dtype=torch.float64)
    all_reduce_max(row_max, tp_group)
    safe_max = torch.where(torch.isfinite(row_max), row_max, 0.0)
    use_top_p = top_p is not None and top_p < 1
    width = min(top_k, v_local) if top_k is not None else v_local
    rows, columns = [], []
    for start, end in chunk_bounds(count, chunk_size):
        z = logits[start:end].double() / temperature
        m = safe_max[start:end]
        live = torch.isfinite(z)
        if min_p is not None and min_p > 0:
            live &= (z - m[:, None]).exp() >= min_p
        z = z.masked_fill_(~live, -math.inf)
        threshold = torch.full((end - start,), -math.inf, dtype=torch.float64, device=z.device)
        if top_k is not None or use_top_p:
            candidates = gather_candidates(z.topk(width, dim=1).values, tp_group)
            if top_k is not None and top_k <= size * width:
                threshold = torch.sort(candidates, dim=1, descending=True).values[:, top_k - 1]
            if use_top_p:
                survivors = live & (z >= threshold[:, None])
                mass = torch.where(survivors, (z - m[:, None]).exp(), 0.0).sum(dim=1, keepdim=True)
                mass = sum_in_rank_order(mass, tp_group).squeeze(1)
                threshold = torch.maximum(threshold, _top_p_threshold(candidates, threshold, m, mass, top_p))
        kept = (live & (z >= threshold[:, None])).nonzero()
        rows.append(kept[:, 0] + start)
        columns.append(kept[:, 1])
    empty = torch.zeros(0, dtype=torch.long, device=logits.device)
    return torch.cat([empty] + rows), torch.cat([empty] + columns)


def sampled_log_probs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    tp_group=None,
    chunk_size: int | None = None,
    with_entropy: bool = True,
    entropy_grad: bool = True,
    temperature: float = 1.0,
    on_outside: str = "error",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob and entropy over the kept set the sampler derives (min-p, then top-k, then top-p; ties kept).

    Arguments as ``impl.sampling.kept_log_probs_and_entropy``, with the
    sampling parameters instead of the kept set; ``None`` disables a filter.
    A target outside the derived set (the trainer's logits disagree with the
    engine's near a boundary) follows ``on_outside``.
    """
    agree_on_sampling_call(
        logits,
        targets,
        tp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        lambda: check_sampling_params(top_k, top_p, min_p),
        on_outside=on_outside,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
    )
    with torch.no_grad():
        rows, columns = derived_local_entries(logits, tp_group, chunk_size, float(temperature), top_k, top_p, min_p)
    return kept_entries_log_probs(
        logits, targets, rows, columns, tp_group, chunk_size, with_entropy, entropy_grad, temperature, on_outside
    )
