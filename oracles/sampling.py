"""Float64 references for sampling-distribution replay (docs/math.md, "Sampling-distribution replay"; docs/sampling.md).

The engine samples from the *processed* distribution: logits ``x`` divided by
the temperature ``tau`` (``z = x / tau``), truncated to a kept set ``K`` and
renormalised over it:

    p~_v = exp(z_v) / sum_{u in K} exp(z_u)   (v in K; 0 outside)
    log p~_t = z_t - lse_K(z)
    H~ = -sum_{v in K} p~_v log p~_v

``K`` is a bool ``[rows, V]`` matrix over GLOBAL column ids. It arrives from
the engine (CSR ``ids``/``offsets``, or one dense ``[rows, V_local]`` mask per
TP shard) or is derived here from the logits with vLLM's rules and order:
temperature, then min-p, then top-k, then top-p over what survived (its mass
renormalised over the survivors). A ``-inf`` logit is never kept by a derived
rule (vLLM's kept set is the finite entries of its processed logits).

Ties (docs/sampling.md, "Ties at the k-th value"): ``ties="all"`` (default) keeps every column
whose value equals the boundary value (top-k: ``z_v >= k-th largest``; top-p:
kept iff the mass of strictly larger values is ``< p``): a function of the
values only. ``ties="lowest_id"`` orders by value descending, then id
ascending, and keeps exactly that prefix (vLLM's Triton kernel).

Dumb on purpose: one global row at a time in spirit, sorts and cumsums in
float64, differentiable by float64 autograd, exactly 0 gradient outside ``K``.
Bad arguments raise ``ValueError`` naming the argument.
"""

from __future__ import annotations

import math

import torch

TIES = ("all", "lowest_id")
ON_OUTSIDE = ("error", "force_keep", "neg_inf")


# ---- validation ---------------------------------------------------------------------


def _check_logits(logits: torch.Tensor, name: str = "logits") -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"{name} must be a floating [rows, V] tensor")
    x = logits.detach()
    if torch.isnan(x).any() or (x == math.inf).any():
        raise ValueError(f"{name} must not contain NaN or +inf")
    if x.shape[0] and not torch.isfinite(x).any(dim=-1).all():
        raise ValueError(f"{name} has a row with no finite logit: no distribution to truncate")


def _check_temperature(temperature: float) -> None:
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r} (greedy is not a distribution)")


def _check_k(k, name: str) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise ValueError(f"{name} must be an int >= 1 (None disables it), got {k!r}")


def _check_p(p, name: str) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ValueError(f"{name} must be in (0, 1] (1 disables it), got {p!r}")


def _check_min_p(min_p, name: str) -> None:
    if isinstance(min_p, bool) or not isinstance(min_p, (int, float)) or not 0 <= min_p <= 1:
        raise ValueError(f"{name} must be in [0, 1] (0 disables it), got {min_p!r}")


def _check_ties(ties: str) -> None:
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")


def _check_kept(kept: torch.Tensor, shape) -> None:
    if not isinstance(kept, torch.Tensor) or kept.dtype != torch.bool or tuple(kept.shape) != tuple(shape):
        raise ValueError(f"kept must be a bool tensor of shape {tuple(shape)}")


def _check_targets(targets: torch.Tensor, rows: int, vocab: int) -> None:
    if not isinstance(targets, torch.Tensor) or targets.dim() != 1 or targets.shape[0] != rows:
        raise ValueError(f"targets must be a 1-D tensor with one id per row ({rows})")
    if targets.is_floating_point() or targets.dtype == torch.bool:
        raise ValueError("targets must be an integer tensor")
    if targets.numel() and (targets.min() < 0 or targets.max() >= vocab):
        raise ValueError(f"targets must be ids in [0, {vocab})")


# ---- the kept set as given by the engine ---------------------------------------------


def kept_from_csr(ids, offsets, vocab: int) -> torch.Tensor:
    """``K`` from CSR: row ``r`` keeps the GLOBAL ids ``ids[offsets[r]:offsets[r+1]]``.

    A set: order and repeats are ignored; an empty span keeps nothing (that row then
    needs ``force_keep`` before a log-prob is defined).
    """
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise ValueError(f"vocab must be an int >= 1, got {vocab!r}")
    ids = torch.as_tensor(ids).cpu()
    offsets = torch.as_tensor(offsets).cpu()
    if ids.numel() == 0:
        ids = ids.long()  # torch.as_tensor([]) is float
    if ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError("ids must be a 1-D integer tensor of global token ids")
    if offsets.dim() != 1 or offsets.numel() < 1 or offsets.is_floating_point() or offsets.dtype == torch.bool:
        raise ValueError("offsets must be a 1-D integer tensor of rows + 1 entries")
    ids, offsets = ids.long(), offsets.long()
    if offsets[0] != 0 or offsets[-1] != ids.numel():
        raise ValueError(
            f"offsets must start at 0 and end at len(ids) = {ids.numel()}, got {offsets[0]}..{offsets[-1]}"
        )
    if (offsets[1:] < offsets[:-1]).any():
        raise ValueError("offsets must be non-decreasing")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"ids must be global token ids in [0, {vocab})")
    rows = offsets.numel() - 1
    kept = torch.zeros(rows, vocab, dtype=torch.bool)
    row_of = torch.repeat_interleave(torch.arange(rows), offsets[1:] - offsets[:-1])
    kept[row_of, ids] = True
    return kept


def kept_from_dense(local_masks) -> torch.Tensor:
    """``K`` from one bool ``[rows, V_local]`` mask per TP rank, in rank order.

    Rank ``k`` holds the global columns ``[k V_local, (k+1) V_local)`` (docs/math.md,
    "Tensor parallelism over the vocabulary"); the result is ``[rows, tp V_local]``.
    """
    masks = list(local_masks)
    if not masks:
        raise ValueError("local_masks must hold one mask per TP rank (got none)")
    for rank, mask in enumerate(masks):
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
            raise ValueError(f"local_masks[{rank}] must be a bool [rows, V_local] tensor")
        if mask.shape != masks[0].shape:
            raise ValueError(
                f"local_masks[{rank}] has shape {tuple(mask.shape)}, rank 0 {tuple(masks[0].shape)}: "
                "TP shards hold the same rows and equal vocabulary slices"
            )
    return torch.cat([m.cpu() for m in masks], dim=-1)


def force_keep(kept: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``K ∪ {t}`` per row (slime's rule: the sampled token is always kept)."""
    if not isinstance(kept, torch.Tensor) or kept.dtype != torch.bool or kept.dim() != 2:
        raise ValueError("kept must be a bool [rows, V] tensor")
    _check_targets(targets, kept.shape[0], kept.shape[1])
    out = kept.clone()
    out[torch.arange(kept.shape[0], device=kept.device), targets.long().to(kept.device)] = True
    return out


def target_outside(kept: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Bool ``[rows]``: the row's target is not in ``K``."""
    if not isinstance(kept, torch.Tensor) or kept.dtype != torch.bool or kept.dim() != 2:
        raise ValueError("kept must be a bool [rows, V] tensor")
    _check_targets(targets, kept.shape[0], kept.shape[1])
    return ~kept[torch.arange(kept.shape[0], device=kept.device), targets.long().to(kept.device)]


# ---- the kept set derived from the logits --------------------------------------------


def _prefix_to_columns(values: torch.Tensor, keep_sorted: torch.Tensor, order: torch.Tensor, ties: str) -> torch.Tensor:
    """Map a kept prefix of the (value desc, id asc) order back to columns.

    ``lowest_id``: exactly the prefix. ``all``: every finite column whose value is at
    least the smallest value in the prefix (the prefix always holds >= 1 column).
    """
    if ties == "lowest_id":
        return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    last = keep_sorted.sum(dim=-1, keepdim=True) - 1
    threshold = values.gather(-1, order).gather(-1, last)
    return (values >= threshold) & torch.isfinite(values)


def _sorted(values: torch.Tensor):
    """Stable descending sort: ties come out in increasing column id."""
    return torch.sort(values, dim=-1, descending=True, stable=True)


def top_k_mask(logits: torch.Tensor, k: int, ties: str = "all") -> torch.Tensor:
    """Top-k over the finite logits (temperature-free: ``tau > 0`` keeps the order). ``k >= V`` keeps all."""
    _check_logits(logits)
    _check_k(k, "k")
    _check_ties(ties)
    x = logits.detach().double()
    values, order = _sorted(x)
    rank = torch.arange(x.shape[-1], device=x.device).expand_as(x)
    keep_sorted = (rank < k) & torch.isfinite(values)
    return _prefix_to_columns(x, keep_sorted, order, ties)


def top_p_mask(logits: torch.Tensor, p: float, temperature: float = 1.0, ties: str = "all") -> torch.Tensor:
    """Top-p over ``softmax(logits / tau)``: the shortest descending prefix whose mass reaches ``p``.

    Rank ``r`` (value desc, id asc) is kept iff the mass ranked before it is ``< p``,
    so the entry that crosses ``p`` is kept and one that reaches it exactly ends the
    prefix. ``p == 1`` keeps every finite logit (vLLM and NeMo-RL skip the filter).
    """
    _check_logits(logits)
    _check_p(p, "p")
    _check_temperature(temperature)
    _check_ties(ties)
    z = logits.detach().double() / temperature
    finite = torch.isfinite(z)
    if p == 1:
        return finite
    values, order = _sorted(z)
    q = torch.softmax(values, dim=-1)
    before = torch.cat([torch.zeros_like(q[:, :1]), torch.cumsum(q, dim=-1)[:, :-1]], dim=-1)
    keep_sorted = (before < p) & torch.isfinite(values)
    return _prefix_to_columns(z, keep_sorted, order, ties)


def min_p_mask(logits: torch.Tensor, min_p: float, temperature: float = 1.0) -> torch.Tensor:
    """Min-p: keep ``v`` iff ``p_v >= min_p * max_u p_u`` with ``p = softmax(logits / tau)`` (equality kept)."""
    _check_logits(logits)
    _check_min_p(min_p, "min_p")
    _check_temperature(temperature)
    z = logits.detach().double() / temperature
    ratio = torch.exp(z - z.max(dim=-1, keepdim=True).values)  # p_v / p_max
    return (ratio >= min_p) & torch.isfinite(z)


def derive_kept(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    ties: str = "all",
) -> torch.Tensor:
    """``K`` as vLLM's sampler builds it: ``z = x / tau``; min-p; top-k; top-p over the survivors.

    Each filter sees the previous one's survivors (the rest set to ``-inf``), so
    top-p's mass is renormalised over what min-p and top-k kept. ``None`` disables
    a filter (engines spell it ``top_k = 0 / -1``, ``top_p = 1``, ``min_p = 0``).
    """
    _check_logits(logits)
    _check_temperature(temperature)
    if top_k is not None:
        _check_k(top_k, "top_k")
    if top_p is not None:
        _check_p(top_p, "top_p")
    if min_p is not None:
        _check_min_p(min_p, "min_p")
    _check_ties(ties)
    x = logits.detach().double()
    kept = torch.isfinite(x)
    if min_p is not None:
        kept &= min_p_mask(x, min_p, temperature)
    if top_k is not None:
        kept &= top_k_mask(x.masked_fill(~kept, -math.inf), top_k, ties)
    if top_p is not None:
        kept &= top_p_mask(x.masked_fill(~kept, -math.inf), top_p, temperature, ties)
    return kept


# ---- the processed distribution ------------------------------------------------------


def _restricted(logits, kept, temperature, targets=None, on_outside="error"):
    """Validate, apply the target rule, return ``(z_K, kept, outside)``: ``z`` on ``K``, ``-inf`` elsewhere."""
    _check_logits(logits)
    _check_temperature(temperature)
    _check_kept(kept, logits.shape)
    kept = kept.to(logits.device)
    outside = None
    if targets is not None:
        if on_outside not in ON_OUTSIDE:
            raise ValueError(f"on_outside must be one of {ON_OUTSIDE}, got {on_outside!r}")
        _check_targets(targets, logits.shape[0], logits.shape[1])
        targets = targets.to(logits.device)
        outside = target_outside(kept, targets)
        if on_outside == "error" and outside.any():
            rows = outside.nonzero().flatten()[:8].tolist()
            raise ValueError(
                f"targets outside kept in rows {rows}: pass on_outside='force_keep' (slime) or 'neg_inf' (NeMo-RL)"
            )
        if on_outside == "force_keep":
            kept = force_keep(kept, targets)
    live = kept & torch.isfinite(logits.detach())
    if logits.shape[0] and not live.any(dim=-1).all():
        raise ValueError("kept has a row with no kept finite logit: p~ is undefined there")
    z = logits.double() / temperature
    # where(): the gradient reaching z outside K is exactly 0, and no -inf ever meets exp's backward as NaN
    return torch.where(kept, z, torch.full_like(z, -math.inf)), kept, outside


def _lse(zk: torch.Tensor) -> torch.Tensor:
    """``lse_K`` per row, ``[rows, 1]``; the max is held constant (the value does not depend on it)."""
    m = zk.max(dim=-1, keepdim=True).values.detach()
    return m + (zk - m).exp().sum(dim=-1, keepdim=True).log()


def processed_log_probs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    kept: torch.Tensor,
    temperature: float = 1.0,
    on_outside: str = "error",
) -> torch.Tensor:
    """``log p~_t = z_t - lse_K(z)``, float64 ``[rows]``.

    A target outside ``K``: ``on_outside="error"`` raises, ``"force_keep"`` uses
    ``K ∪ {t}`` (slime), ``"neg_inf"`` returns ``-inf`` with gradient 0 (what a plain
    masked ``log_softmax`` + gather gives, as NeMo-RL's does).
    """
    zk, _, outside = _restricted(logits, kept, temperature, targets, on_outside)
    t = targets.long().to(zk.device)
    picked = zk.gather(-1, t[:, None]).squeeze(-1)
    if on_outside == "neg_inf":
        # outside rows: -inf constant (no gradient); the rest: picked is finite or a genuine -inf logit
        picked = torch.where(outside, torch.zeros_like(picked), picked)
        return torch.where(outside, torch.full_like(picked, -math.inf), picked - _lse(zk).squeeze(-1))
    return picked - _lse(zk).squeeze(-1)


def processed_entropy(logits: torch.Tensor, kept: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``H~ = -sum_{v in K} p~_v log p~_v``, float64 ``[rows]``; entries outside ``K`` (and ``-inf`` logits) add 0.

    The ``-inf`` entries are replaced by 0 before ``exp`` and the product, so the
    discarded branch sends back ``0``, never ``0 * inf`` (the where-gradient trap).
    """
    zk, _, _ = _restricted(logits, kept, temperature)
    live = torch.isfinite(zk)
    log_p = torch.where(live, zk - _lse(zk), torch.zeros_like(zk))
    p = torch.where(live, log_p.exp(), torch.zeros_like(zk))
    return -(p * log_p).sum(dim=-1)
