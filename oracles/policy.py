"""Float64 references for what consumes the log-probs: policy losses (docs/policy-losses.md).

Dumb on purpose: one short function per definition, float64, no clamping
for numerical safety (the trainers clamp log-ratios at +-20 in float32; the
oracle keeps the exact value). Every stop-gradient a definition has is an
explicit ``.detach()``; everything else is differentiable by autograd.

Shapes: the per-token functions (``ratio``, ``ppo_clip_terms``, ``dual_clip``,
``cispo_terms``, ``kl``, ``kl_reward``) are elementwise. The per-sample
functions (``gspo_ratio``, ``gspo_terms``, ``rollout_weights``) take ONE
sample's 1-D response tensors and its 0/1 mask. ``aggregate`` and
``policy_loss`` take per-sample lists.

Conventions:
- Advantages are per token (a sequence-level advantage is broadcast by the caller).
- A sample with no response, or with every token masked, contributes 0 with
  zero gradient; a batch whose masks are all zero has loss 0, never NaN.
- The seq-mean modes divide by the number of samples in the batch, empty or
  fully masked ones included (slime, SkyRL, TRL, NeMo-RL with sample_mask = 1;
  verl's single-rank fallback counts only samples with a token).
- Rollout-correction weights that are zero (MIS) leave the token in every
  denominator (slime, SkyRL, TRL, NeMo-RL, verl IcePop; not verl's rejection
  sampling, which edits the response mask).
- Values at masked positions must be finite: they are multiplied by 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KL_KINDS = ("k1", "k2", "k3", "low_var_kl", "abs", "k1+", "k2+", "k3+", "low_var_kl+")
AGGREGATIONS = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "sum-of-sample-mean",
)
ROLLOUT_MODES = ("tis", "mis", "rs")
ROLLOUT_LEVELS = ("token", "sequence", "geometric")


# ---- per token ---------------------------------------------------------------------------


def ratio(logp: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``r = exp(logp - old)``: the importance ratio pi_theta / pi_old, gradient through ``logp``."""
    return torch.exp(logp.double() - old.double())


def dual_clip(pg: torch.Tensor, adv: torch.Tensor, c: float) -> torch.Tensor:
    """Dual clip (Ye et al. 2019): where ``A < 0``, ``min(pg, -c A)`` (= ``c |A|``); ``A >= 0`` untouched."""
    adv = adv.double()
    return torch.where(adv < 0, torch.minimum(pg, -c * adv), pg)


def ppo_clip_terms(logp, old, adv, eps_low: float, eps_high: float, dual_clip_c: float | None = None):
    """Per-token PPO loss ``max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))``, then the dual clip if ``c``."""
    r = ratio(logp, old)
    adv = adv.double()
    pg = torch.maximum(-adv * r, -adv * r.clamp(1 - eps_low, 1 + eps_high))
    return pg if dual_clip_c is None else dual_clip(pg, adv, dual_clip_c)


def cispo_terms(logp, old, adv, eps_low: float | None, eps_high: float):
    """CISPO: ``-sg(clip(r, 1 - eps_low, 1 + eps_high)) A logp``; ``eps_low=None``: no lower bound.

    The weight is detached, so the gradient is ``-clip(r) A`` per token even where r is clipped.
    """
    low = None if eps_low is None else 1 - eps_low
    weight = ratio(logp, old).clamp(low, 1 + eps_high).detach()
    return -weight * adv.double() * logp.double()


def _k2(d: torch.Tensor) -> torch.Tensor:
    return d * d / 2


def kl(logp, ref, kind: str) -> torch.Tensor:
    """Per-token KL(pi_theta || pi_ref) estimator of the samples; ``d = logp - ref``.

    ``k1 = d``, ``k2 = d^2 / 2``, ``k3 = exp(-d) + d - 1``, ``abs = |d|``;
    ``low_var_kl`` is k3 with verl's clamps: ``x = clamp(-d, -20, 20)``, then
    ``min(exp(x) - x - 1, 10)`` (zero gradient where either clamp bites).
    ``kind + "+"``: the value of ``kind`` with the gradient of k2 (verl's straight-through).
    """
    if kind.endswith("+"):
        d = logp.double() - ref.double()
        return kl(logp, ref, kind[:-1]).detach() + _k2(d) - _k2(d).detach()
    d = logp.double() - ref.double()
    if kind == "k1":
        return d
    if kind == "k2":
        return _k2(d)
    if kind == "k3":
        return torch.exp(-d) + d - 1
    if kind == "abs":
        return d.abs()
    if kind == "low_var_kl":
        x = (-d).clamp(-20, 20)
        return (torch.exp(x) - x - 1).clamp(max=10)
    raise ValueError(f"kl kind {kind!r} is not one of {KL_KINDS}")


def kl_reward(old, ref, kind: str, coef: float) -> torch.Tensor:
    """KL as a reward penalty: ``-coef * kl(old, ref)`` added to the token rewards, detached (no gradient).

    Uses the log-probs the batch was scored with (``old``), before any update.
    """
    return (-coef * kl(old, ref, kind)).detach()


# ---- per sample --------------------------------------------------------------------------


def _count(mask) -> float:
    return float(mask.double().sum())


def gspo_ratio(logp, old, mask) -> torch.Tensor:
    """GSPO's sequence ratio ``s = exp(sum_t m_t (logp_t - old_t) / max(n, 1))``, n = masked tokens.

    Differentiable through every token of the sample (the sequence-level form).
    """
    m = mask.double()
    return torch.exp(((logp.double() - old.double()) * m).sum() / max(_count(mask), 1.0))


def gspo_terms(logp, old, adv, mask, eps_low: float, eps_high: float, dual_clip_c: float | None = None):
    """GSPO-token: per token ``s_t = sg(s) * exp(logp_t - sg(logp_t))``, then the PPO clip on ``s_t``.

    ``s_t`` equals ``s`` (so the clip decision is the sample's), and its gradient
    w.r.t. ``logp_t`` is ``s`` through token t alone.
    """
    lp = logp.double()
    s_t = gspo_ratio(logp, old, mask).detach() * torch.exp(lp - lp.detach())
    adv = adv.double()
    pg = torch.maximum(-adv * s_t, -adv * s_t.clamp(1 - eps_low, 1 + eps_high))
    return pg if dual_clip_c is None else dual_clip(pg, adv, dual_clip_c)


def rollout_weights(old, rollout, mask, cap: float, mode: str = "tis", level: str = "token", floor=None):
    """Detached rollout-correction weights of one sample, from ``w = pi_old / pi_rollout``.

    ``level``: ``token`` ``w_t = exp(old_t - rollout_t)``; ``sequence`` one weight
    ``exp(sum_t m_t (old_t - rollout_t))`` (the product) for every token;
    ``geometric`` ``exp(mean)`` over the masked tokens.
    ``mode``: ``tis`` ``clamp(w, floor, cap)``; ``mis`` ``w`` inside ``[floor, cap]``
    and 0 outside; ``rs`` 1 inside and 0 outside. ``floor=None``: no lower bound.
    """
    log_w = (old.double() - rollout.double()).detach()
    m = mask.double()
    if level == "sequence":
        log_w = ((log_w * m).sum()).expand_as(log_w)
    elif level == "geometric":
        log_w = ((log_w * m).sum() / max(_count(mask), 1.0)).expand_as(log_w)
    elif level != "token":
        raise ValueError(f"rollout level {level!r} is not one of {ROLLOUT_LEVELS}")
    w = torch.exp(log_w)
    if mode == "tis":
        return w.clamp(floor, cap)
    keep = (w <= cap) & (w >= (0.0 if floor is None else floor))
    if mode == "mis":
        return torch.where(keep, w, torch.zeros_like(w))
    if mode == "rs":
        return keep.double()
    raise ValueError(f"rollout mode {mode!r} is not one of {ROLLOUT_MODES}")


# ---- aggregation -------------------------------------------------------------------------


def numerator(values, masks, mode: str, sample_tokens=None) -> torch.Tensor:
    """``sum_i c_i sum_t m_it x_it``: additive over any split of the batch's tokens into chunks.

    ``c_i = 1 / max(n_i, 1)`` for ``seq-mean-token-mean`` and ``sum-of-sample-mean``,
    else 1. ``n_i`` is the WHOLE sample's masked-token count: ``sample_tokens[i]``
    when a chunk holds only part of sample i (context parallelism), else its mask's sum.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation {mode!r} is not one of {AGGREGATIONS}")
    total = torch.zeros((), dtype=torch.float64)
    for i, (x, m) in enumerate(zip(values, masks, strict=True)):
        term = (x.double() * m.double()).sum()
        if mode in ("seq-mean-token-mean", "sum-of-sample-mean"):
            n = _count(m) if sample_tokens is None else float(sample_tokens[i])
            term = term / max(n, 1.0)
        total = total + term
    return total


def denominator(masks, mode: str, horizon: float | None = None) -> float:
    """The mode's normaliser over the WHOLE batch (every rank and chunk), a host number.

    ``token-mean``: masked tokens; ``seq-mean-token-sum``/``seq-mean-token-mean``:
    samples; ``seq-mean-token-sum-norm``: samples x ``horizon`` (a constant, e.g.
    the maximum response length); ``token-sum`` and ``sum-of-sample-mean``: 1.
    """
    if mode == "token-mean":
        return sum(_count(m) for m in masks)
    if mode in ("seq-mean-token-sum", "seq-mean-token-mean"):
        return float(len(masks))
    if mode == "seq-mean-token-sum-norm":
        if horizon is None or horizon <= 0:
            raise ValueError("seq-mean-token-sum-norm needs a positive constant horizon")
        return float(len(masks)) * horizon
    if mode in ("token-sum", "sum-of-sample-mean"):
        return 1.0
    raise ValueError(f"aggregation {mode!r} is not one of {AGGREGATIONS}")


def aggregate(values, masks, mode: str, horizon: float | None = None) -> torch.Tensor:
    """``numerator / denominator``; a zero denominator (nothing unmasked) gives 0 with zero gradient."""
    den = denominator(masks, mode, horizon)
    return numerator(values, masks, mode) / (den if den > 0 else 1.0)


# ---- the composed loss -------------------------------------------------------------------


@dataclass(frozen=True)
class LossOptions:
    """What ``policy_loss`` computes; names follow docs/policy-losses.md."""

    kind: str = "ppo"  # 'ppo' | 'gspo' | 'cispo'
    eps_low: float | None = 0.2  # None only for cispo: no lower bound
    eps_high: float = 0.2
    dual_clip_c: float | None = None  # > 1; ppo and gspo only
    kl_kind: str = "k3"
    kl_coef: float = 0.0
    kl_as: str = "loss"  # 'loss' (gradient) | 'reward' (folded into the advantages; no term here)
    kl_ratio_weighted: bool = False  # kl * r with r's gradient (slime use_unbiased_kl, TRL, NeMo-RL)
    entropy_coef: float = 0.0
    rollout_correction: str | None = None  # None | 'tis' | 'mis' | 'rs'
    rollout_cap: float = 2.0
    rollout_floor: float | None = None
    rollout_level: str = "token"
    aggregation: str = "token-mean"
    horizon: float | None = None  # seq-mean-token-sum-norm only

    def __post_init__(self):
        checks = [
            (self.kind in ("ppo", "gspo", "cispo"), f"kind {self.kind!r} is not 'ppo', 'gspo' or 'cispo'"),
            (self.eps_low is not None or self.kind == "cispo", "eps_low=None (no lower bound) is for cispo only"),
            (self.dual_clip_c is None or self.dual_clip_c > 1, f"dual_clip_c must be > 1, got {self.dual_clip_c}"),
            (self.dual_clip_c is None or self.kind != "cispo", "dual_clip_c does not apply to cispo"),
            (self.kl_kind in KL_KINDS, f"kl_kind {self.kl_kind!r} is not one of {KL_KINDS}"),
            (self.kl_as in ("loss", "reward"), f"kl_as {self.kl_as!r} is not 'loss' or 'reward'"),
            (self.rollout_correction in (None, *ROLLOUT_MODES), f"rollout_correction {self.rollout_correction!r}"),
            (self.rollout_level in ROLLOUT_LEVELS, f"rollout_level {self.rollout_level!r}"),
            (self.aggregation in AGGREGATIONS, f"aggregation {self.aggregation!r} is not one of {AGGREGATIONS}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def pg_terms(logp, old, adv, mask, opts: LossOptions, rollout=None) -> torch.Tensor:
    """One sample's per-token policy-gradient loss, times its rollout-correction weights if any."""
    if opts.kind == "ppo":
        pg = ppo_clip_terms(logp, old, adv, opts.eps_low, opts.eps_high, opts.dual_clip_c)
    elif opts.kind == "gspo":
        pg = gspo_terms(logp, old, adv, mask, opts.eps_low, opts.eps_high, opts.dual_clip_c)
    else:
        pg = cispo_terms(logp, old, adv, opts.eps_low, opts.eps_high)
    if opts.rollout_correction is None:
        return pg
    weights = rollout_weights(
        old, rollout, mask, opts.rollout_cap, opts.rollout_correction, opts.rollout_level, opts.rollout_floor
    )
    return pg * weights


def policy_loss(logp, old, adv, masks, opts: LossOptions, *, ref=None, rollout=None, entropy=None):
    """``agg(pg) + kl_coef * agg(kl) - entropy_coef * agg(H)``, every term with ``opts.aggregation``.

    Per-sample lists. The KL term is present only when ``kl_as == 'loss'`` and
    ``kl_coef != 0`` (as a reward it lives in the advantages); the entropy term
    only when ``entropy`` is given and ``entropy_coef != 0``.
    """
    if opts.rollout_correction is not None and rollout is None:
        raise ValueError("rollout_correction needs the rollout's log-probs (rollout=)")
    rollout = rollout if rollout is not None else [None] * len(logp)
    pg = [pg_terms(*sample, opts, rollout=ro) for sample, ro in zip(zip(logp, old, adv, masks, strict=True), rollout)]
    loss = aggregate(pg, masks, opts.aggregation, opts.horizon)
    if opts.kl_as == "loss" and opts.kl_coef != 0:
        if ref is None:
            raise ValueError("a KL loss term needs the reference log-probs (ref=)")
        per_token = [kl(lp, rf, opts.kl_kind) for lp, rf in zip(logp, ref, strict=True)]
        if opts.kl_ratio_weighted:
            per_token = [k * ratio(lp, o) for k, lp, o in zip(per_token, logp, old, strict=True)]
        loss = loss + opts.kl_coef * aggregate(per_token, masks, opts.aggregation, opts.horizon)
    if entropy is not None and opts.entropy_coef != 0:
        loss = loss - opts.entropy_coef * aggregate(entropy, masks, opts.aggregation, opts.horizon)
    return loss
