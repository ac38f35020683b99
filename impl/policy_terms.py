"""The per-token terms and the aggregation of the policy loss (docs/policy-losses.md).

Everything here works on per-sample log-prob tensors that are already
computed: the PPO / GSPO / CISPO policy-gradient term, the dual clip, the
rollout-correction weights (TIS / MIS / rejection), the KL penalty and the
loss aggregation modes. The historic bug shapes it is written against:

* a term without its gradient (a detached KL, a CISPO weight WITH a gradient);
* a clip on the wrong side (dual clip on positive advantages, TIS truncating
  from below);
* a normaliser that changes with the layout: under context parallelism every
  rank holds part of each sample, so counts and sequence-level sums are taken
  over the WHOLE sample (the caller's full masks, a CP sum of the detached
  per-sample sums), never this rank's part;
* NaN from masked positions: every log-ratio is zeroed where the mask is 0
  before it is exponentiated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .row_stats import sum_in_rank_order

KINDS = ("ppo", "gspo", "cispo")
KL_KINDS = ("k1", "k2", "k3", "low_var_kl", "abs")
ROLLOUT_MODES = ("tis", "mis", "rs")
ROLLOUT_LEVELS = ("token", "sequence", "geometric")
AGGREGATIONS = (
    "sum-of-sample-mean",
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


@dataclass(frozen=True)
class LossTerms:
    """What the policy loss computes besides PPO-clip with ``sum-of-sample-mean`` (the defaults)."""

    kind: str = "ppo"
    dual_clip_c: float | None = None
    kl_kind: str = "k3"
    kl_coef: float = 0.0
    kl_ratio_weighted: bool = False
    rollout_correction: str | None = None
    rollout_cap: float = 2.0
    rollout_floor: float | None = None
    rollout_level: str = "token"
    aggregation: str = "sum-of-sample-mean"
    horizon: float | None = None

    def problems(self) -> list[str]:
        """Each invalid setting as a message naming the argument and the fix (empty when valid)."""
        checks = [
            (self.kind in KINDS, f"kind={self.kind!r}: choose one of {KINDS}"),
            (
                self.dual_clip_c is None or (self.dual_clip_c > 1 and self.kind != "cispo"),
                f"dual_clip_c={self.dual_clip_c!r}: must be > 1, and None for kind='cispo'",
            ),
            (self.kl_kind in KL_KINDS, f"kl_kind={self.kl_kind!r}: choose one of {KL_KINDS}"),
            (
                self.rollout_correction in (None, *ROLLOUT_MODES),
                f"rollout_correction={self.rollout_correction!r}: choose None or one of {ROLLOUT_MODES}",
            ),
            (self.rollout_level in ROLLOUT_LEVELS, f"rollout_level={self.rollout_level!r}: one of {ROLLOUT_LEVELS}"),
            (self.rollout_cap > 0, f"rollout_cap={self.rollout_cap!r}: must be > 0"),
            (
                self.rollout_floor is None or 0 <= self.rollout_floor <= self.rollout_cap,
                f"rollout_floor={self.rollout_floor!r}: must be None or in [0, rollout_cap]",
            ),
            (self.aggregation in AGGREGATIONS, f"aggregation={self.aggregation!r}: choose one of {AGGREGATIONS}"),
            (
                self.aggregation != "seq-mean-token-sum-norm" or (self.horizon or 0) > 0,
                "aggregation='seq-mean-token-sum-norm' needs a positive constant horizon=",
            ),
        ]
        return [message for ok, message in checks if not ok]


def _masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` where the mask is set, 0 elsewhere (a dropped position may hold anything finite or not)."""
    return torch.where(mask > 0, values, torch.zeros((), dtype=values.dtype, device=values.device))


def sample_sums(values: list, masks: list, cp_group) -> torch.Tensor:
    """Per sample, the masked sum of detached ``values`` over the WHOLE sample (summed over the CP group)."""
    if not values:
        return torch.zeros(0)
    local = torch.stack([_masked(v.detach(), m).sum() for v, m in zip(values, masks)])
    return sum_in_rank_order(local, cp_group)


def sample_means(values: list, masks: list, counts: list, cp_group) -> list:
    """Per sample, the masked mean of detached ``values`` over the WHOLE sample (``counts``: its tokens)."""
    sums = sample_sums(values, masks, cp_group)
    return [total / count.to(total).clamp(min=1) for total, count in zip(sums, counts)]


def clip_terms(ratio, advantage, eps_low: float, eps_high: float, dual_clip_c: float | None) -> torch.Tensor:
    """``max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))``; the dual clip caps it at ``-c A`` where ``A < 0``."""
    pg = torch.maximum(-advantage * ratio, -advantage * ratio.clamp(1 - eps_low, 1 + eps_high))
    if dual_clip_c is None:
        return pg
    return torch.where(advantage < 0, torch.minimum(pg, -dual_clip_c * advantage), pg)


def pg_terms(terms: LossTerms, log_probs, old_log_probs, advantages, masks, counts, eps_low, eps_high, cp_group):
    """Per sample, the per-token policy-gradient loss (before the rollout weights)."""
    # Masked positions get log-ratio 0: a dropped (loss-mask-only) position reads 0, and exp(0 - old)
    # could overflow into inf * 0 = NaN.
    log_ratios = [_masked(lp - old.to(lp), m) for lp, old, m in zip(log_probs, old_log_probs, masks)]
    advantages = [a.to(lp) for a, lp in zip(advantages, log_probs)]
    if terms.kind == "gspo":
        # GSPO-token: s_t = sg(s) * exp(logp_t - sg(logp_t)) has the value of the sequence ratio s and
        # the gradient s through token t alone; s is the WHOLE sample's mean log-ratio.
        means = sample_means(log_ratios, masks, counts, cp_group)
        return [
            clip_terms(torch.exp(mean.to(lp) + lp - lp.detach()), a, eps_low, eps_high, terms.dual_clip_c)
            for lp, mean, a in zip(log_probs, means, advantages)
        ]
    ratios = [torch.exp(lr) for lr in log_ratios]
    if terms.kind == "cispo":
        # The clipped ratio is a detached weight: the gradient is -clip(r) A per token, clipped or not.
        return [
            -r.clamp(1 - eps_low, 1 + eps_high).detach() * a * _masked(lp, m)
            for r, a, lp, m in zip(ratios, advantages, log_probs, masks)
        ]
    return [clip_terms(r, a, eps_low, eps_high, terms.dual_clip_c) for r, a in zip(ratios, advantages)]


def rollout_weights(terms: LossTerms, old_log_probs, rollout_log_probs, masks, counts, cp_group, like) -> list:
    """Detached weights from ``w = pi_old / pi_rollout``: truncated (tis), masked (mis) or 0/1 (rs)."""
    log_w = [
        _masked((old - rollout.to(old)).to(lp).detach(), m)
        for old, rollout, m, lp in zip(old_log_probs, rollout_log_probs, masks, like)
    ]
    if terms.rollout_level != "token":
        totals = sample_sums(log_w, masks, cp_group)
        if terms.rollout_level == "geometric":
            totals = sample_means(log_w, masks, counts, cp_group)
        log_w = [torch.full_like(lw, float(total)) for lw, total in zip(log_w, totals)]
    weights = []
    for lw in log_w:
        w = torch.exp(lw)
        if terms.rollout_correction == "tis":
            weights.append(w.clamp(terms.rollout_floor, terms.rollout_cap))
            continue
        keep = (w <= terms.rollout_cap) & (w >= (terms.rollout_floor or 0.0))
        if terms.rollout_correction == "rs":
            weights.append(keep.to(w.dtype))
        else:  # mis: the weight inside [floor, cap], 0 outside
            weights.append(torch.where(keep, w, 0.0))
    return weights


def kl_terms(kind: str, log_probs, ref_log_probs, masks) -> list:
    """Per-token KL(pi_theta || pi_ref) estimators of ``d = logp - ref``, with their gradient through logp."""
    out = []
    for lp, ref, m in zip(log_probs, ref_log_probs, masks):
        d = _masked(lp - ref.to(lp), m)
        if kind == "k1":
            out.append(d)
        elif kind == "k2":
            out.append(d * d / 2)
        elif kind == "k3":
            out.append(torch.exp(-d) + d - 1)
        elif kind == "abs":
            out.append(d.abs())
        else:  # low_var_kl: k3 with verl's clamps
            x = (-d).clamp(-20, 20)
            out.append((torch.exp(x) - x - 1).clamp(max=10))
    return out


def denominator(aggregation: str, full_masks: list, horizon: float | None) -> float:
    """The mode's normaliser over the WHOLE batch (full masks on every CP rank); 1 where there is nothing."""
    if aggregation == "token-mean":
        value = float(sum(float(m.sum()) for m in full_masks))
    elif aggregation in ("seq-mean-token-sum", "seq-mean-token-mean"):
        value = float(len(full_masks))
    elif aggregation == "seq-mean-token-sum-norm":
        value = float(len(full_masks)) * horizon
    else:  # token-sum, sum-of-sample-mean
        value = 1.0
    return value if value > 0 else 1.0


def aggregate(values: list, masks: list, counts: list, aggregation: str, full_masks: list, horizon) -> torch.Tensor:
    """``sum_i c_i sum_t m_it x_it / denominator``: this rank's share of the batch's aggregated term.

    ``c_i = 1 / max(n_i, 1)`` (``n_i`` the whole sample's count) for the per-sample means, else 1.
    """
    per_sample_mean = aggregation in ("seq-mean-token-mean", "sum-of-sample-mean")
    total = None
    for value, mask, count in zip(values, masks, counts):
        term = _masked(value, mask).sum()
        if per_sample_mean:
            term = term / count.to(value.dtype).clamp(min=1)
        total = term if total is None else total + term
    if total is None:
        return torch.zeros(())
    return total / denominator(aggregation, full_masks, horizon)
