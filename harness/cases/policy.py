"""The policy-loss inputs a Case implies besides its logits: clip range and behaviour-policy log-probs.

Both the rank-side job (which hands them to the target) and the expected
values (which differentiate the float64 loss) read them from here, so the two
sides can never disagree on the inputs of the loss they compare.

The PPO loss's gradient is discontinuous where a token's ratio crosses a clip
boundary (``1 - EPS_CLIP``, ``1 + EPS_CLIP_HIGH``): there, a log-prob that is
correct within rounding in the Case's dtype may land on the other side of the
boundary than the float64 oracle's and get a different, equally correct
gradient. Such a token tests rounding, not the contract, so behaviour
log-probs are generated with every log-ratio at least ``boundary_margin``
away from both boundaries: the log-prob error the tolerance policy
accepts (harness/checks/tolerance.py: ``FLOOR_ULPS`` ulps of the value scale
and of the output, plus ``NAIVE_FACTOR`` times the naive same-dtype error).
A clip on the wrong side or of the wrong width still moves every clipped
token, far from any boundary. Where the margin is no longer small against
the clip window (``MAX_MARGIN``: low precision at large logit scales), the
boundaries cannot be resolved at all and the log-ratios are left as drawn
(the gradient tolerance there is as wide as the value one).

Loss options (docs/policy-losses.md) ride in ``case.extra["policy"]``, a dict
of ``oracles.policy.LossOptions`` fields (``loss_options``); the clip range
and the entropy coefficient stay the Case's. Options add boundaries of their
own: the dual clip's ``log c`` (per token for PPO), GSPO's clip on the
sample's MEAN log-ratio (each sample's log-ratios are shifted together, by a
per-sample offset so that some samples are clipped), and the rollout
correction's ``log cap`` / ``log floor`` on the (token, sample-sum or
sample-mean) log-weight ``old - rollout``. The reference and rollout
log-probs are float32 values (what the target receives); the reference reads
``old`` as float32 too (``as_sent``), so the rollout weights, a function of
inputs only, are compared on identical values and need only a margin for
float32 summation (``ROLLOUT_MARGIN``).

Regimes (``case.extra["regime"]``, ``with_regime``): each option's formula
differs from its neighbours' only in part of its input space, so the inputs
are drawn in two regimes per quantity. ``near`` (the default, and every Case
from before regimes) keeps ratios near 1 (log-ratios within +-0.4), the
reference policy near the current one (+-0.4) and rollout log-weights within
+-1; ``far`` puts them where the options' clamps, saturations and truncation
bounds bite: log-ratios up to +-``FAR_RATIO`` (ratios from 0.05 to 20, far
outside the clip band and beyond the dual clip), the reference up to
+-``FAR_REFERENCE`` nats away (``low_var_kl`` saturates at 10 below
``-LOW_VAR_KL_KINK``, k3's ``exp(-d)`` reaches ``e^6``) and rollout
log-weights up to +-``FAR_ROLLOUT`` per token (weights far outside the cap
and the floor, also at the sequence level). The kinks a far regime reaches
(``low_var_kl``'s saturation) keep the same margin as the clip boundaries.
"""

from __future__ import annotations

import math

import torch

from harness.cases.case import Case
from oracles import layout, losses, token
from oracles.policy import LossOptions

EPS_CLIP = 0.2
EPS_CLIP_HIGH = 0.28
_BOUNDARIES = (math.log(1 - EPS_CLIP), math.log(1 + EPS_CLIP_HIGH))
MAX_MARGIN = 0.2  # under half the clip window log(1 + EPS_CLIP_HIGH) - log(1 - EPS_CLIP) = 0.47: the zones stay apart


def per_sample_log_probs(case: Case, logits: torch.Tensor, log_probs_fn) -> list[torch.Tensor]:
    """``log_probs_fn`` over each sample's response rows and targets (the oracle's layout)."""
    picked = losses.per_sample(logits, case.response_rows())
    targets = layout.response_targets(case.tokens(), case.response_lengths)
    return [log_probs_fn(z, y, case.temperature) for z, y in zip(picked, targets, strict=True)]


def boundary_margin(case: Case, logits: torch.Tensor, oracle: list[torch.Tensor]) -> float:
    """The tolerance policy's log-prob bound for ``case`` (see the module docstring); ``logits`` in its dtype."""
    naive = per_sample_log_probs(case, logits, token.naive_log_probs)
    naive_err = max((float((n.double() - o).abs().max()) for n, o in zip(naive, oracle) if o.numel()), default=0.0)
    finite = logits[torch.isfinite(logits)]
    scale = float(finite.abs().max()) / case.temperature if finite.numel() else 0.0
    largest = max((float(o.abs().max()) for o in oracle if o.numel()), default=0.0)
    fp32_eps, out_eps = torch.finfo(torch.float32).eps, torch.finfo(case.torch_dtype).eps
    return 8.0 * (fp32_eps * scale + out_eps * largest) + 2.0 * naive_err


DUAL_CLIP_C = 1.4  # inside the drawn ratio range (log-ratios up to 0.4): the dual clip bites on some tokens
REGIMES = ("near", "far")
REGIME_QUANTITIES = ("ratio", "reference", "rollout")
FAR_RATIO = 3.0
FAR_REFERENCE = 6.0
FAR_ROLLOUT = 5.0
LOW_VAR_KL_KINK = 2.6108686381498756  # exp(x) - x - 1 = 10: low_var_kl's saturation at x = -(logp - ref)
ROLLOUT_MARGIN = 1e-3  # log-weights of float32 inputs summed over <= 64 tokens in float32 err < 1e-5
_STREAM_SAMPLE_SHIFT, _STREAM_REF, _STREAM_ROLLOUT = 300, 301, 302  # harness.cases.case streams: under 300
OPTION_FIELDS = (
    "kind",
    "dual_clip_c",
    "kl_kind",
    "kl_coef",
    "kl_ratio_weighted",
    "rollout_correction",
    "rollout_cap",
    "rollout_floor",
    "rollout_level",
    "aggregation",
    "horizon",
)


def option_values(case: Case) -> dict:
    """The Case's non-default loss options (``extra["policy"]``), checked against ``OPTION_FIELDS``."""
    values = dict(case.extra.get("policy") or {})
    unknown = sorted(set(values) - set(OPTION_FIELDS))
    if unknown:
        raise ValueError(f"case.extra['policy'] has unknown option(s) {unknown}; choose from {OPTION_FIELDS}")
    return values


def regime(case: Case, quantity: str) -> str:
    """``near`` or ``far`` (see the module docstring) for ``quantity`` in ``REGIME_QUANTITIES``."""
    given = dict(case.extra.get("regime") or {})
    unknown = sorted(set(given) - set(REGIME_QUANTITIES))
    if unknown or any(value not in REGIMES for value in given.values()):
        raise ValueError(f"case.extra['regime'] = {given}: quantities {REGIME_QUANTITIES}, each one of {REGIMES}")
    return given.get(quantity, "near")


def with_regime(case: Case, **regimes) -> Case:
    """``case`` with the inputs of ``quantity=regime`` pairs drawn in that regime (validated)."""
    changed = case.with_(extra={**case.extra, "regime": {**(case.extra.get("regime") or {}), **regimes}})
    for quantity in REGIME_QUANTITIES:
        regime(changed, quantity)
    return changed


def _spread(case: Case, quantity: str, near: float, far: float) -> float:
    """How far the drawn offsets of ``quantity`` reach (the half-width of their uniform draw)."""
    return far if regime(case, quantity) == "far" else near


def with_options(case: Case, **values) -> Case:
    """``case`` with loss options ``values`` (validated by building the LossOptions)."""
    changed = case.with_(extra={**case.extra, "policy": {**option_values(case), **values}})
    loss_options(changed)
    return changed


def loss_options(case: Case) -> LossOptions:
    """The float64 oracle's options: the Case's clip range and entropy coefficient, sum-of-sample-mean by default."""
    values = {"aggregation": "sum-of-sample-mean", **option_values(case)}
    return LossOptions(eps_low=EPS_CLIP, eps_high=EPS_CLIP_HIGH, entropy_coef=case.entropy_coef, **values)


def as_sent(values: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per-sample inputs as the target receives them (float32), back in float64 for the oracle."""
    return [v.float().double() for v in values]


def _away_from(value: torch.Tensor, boundaries, margin: float) -> torch.Tensor:
    """``value`` moved, where within ``margin`` of a boundary, to ``margin`` away on its own side."""
    for boundary in boundaries:
        near = (value - boundary).abs() < margin
        side = torch.where(value >= boundary, 1.0, -1.0).to(value.dtype)
        value = torch.where(near, boundary + side * margin, value)
    return value


def _resolvable(boundaries, margin: float) -> bool:
    """The boundaries can be kept apart: the margin is under MAX_MARGIN and half of every gap between them."""
    ordered = sorted(boundaries)
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    return margin < min([MAX_MARGIN, *(gap / 2 for gap in gaps)])


def _away_from_boundaries(log_ratio: torch.Tensor, margin: float, boundaries=_BOUNDARIES) -> torch.Tensor:
    if not _resolvable(boundaries, margin):
        return log_ratio
    return _away_from(log_ratio, boundaries, margin)


def _clip_boundaries(opts: LossOptions) -> tuple:
    if opts.dual_clip_c is None or opts.kind == "cispo":
        return _BOUNDARIES
    return (*_BOUNDARIES, math.log(opts.dual_clip_c))


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / max(float(mask.sum()), 1.0)


def _shift_sample_mean(log_ratio: torch.Tensor, mask: torch.Tensor, boundaries, margin: float) -> torch.Tensor:
    """GSPO: shift the sample's masked log-ratios together so their mean keeps ``margin`` from the boundaries."""
    if not _resolvable(boundaries, margin) or float(mask.sum()) == 0:
        return log_ratio
    mean = _masked_mean(log_ratio, mask)
    return log_ratio + (_away_from(mean, boundaries, margin) - mean) * mask


def old_log_probs(case: Case) -> list[torch.Tensor]:
    """Behaviour-policy log-probs: oracle log-probs minus bounded log-ratios (ratios near 1, some clipped)."""
    opts = loss_options(case)
    with torch.no_grad():
        logits = case.global_logits()
        oracle = per_sample_log_probs(case, logits.double(), token.log_probs)
        margin = boundary_margin(case, logits, oracle)
        boundaries = _clip_boundaries(opts)
        offsets = [o * _spread(case, "ratio", 1.0, FAR_RATIO / 0.4) for o in case.old_log_prob_offsets()]
        if opts.kind != "gspo":
            log_ratios = [
                -offset if opts.kind == "cispo" else _away_from_boundaries(-offset, margin, boundaries)
                for offset in offsets
            ]
            return [lp - log_ratio for lp, log_ratio in zip(oracle, log_ratios, strict=True)]
        g = case.generator(_STREAM_SAMPLE_SHIFT)
        shifts = (
            (torch.rand(len(offsets), generator=g, dtype=torch.float64) - 0.5)
            * 2
            * _spread(case, "ratio", 0.4, FAR_RATIO)
        )
        masks = case.loss_masks()
        return [
            lp - _shift_sample_mean(-offset + shift, mask.double(), boundaries, margin)
            for lp, offset, shift, mask in zip(oracle, offsets, shifts, masks, strict=True)
        ]


def _kinks(kind: str) -> tuple:
    """Where an estimator's gradient jumps, in ``d = logp - ref``: ``abs`` at 0, ``low_var_kl``'s saturation."""
    if kind.startswith("abs"):
        return (0.0,)
    if kind.startswith("low_var_kl"):
        return (-LOW_VAR_KL_KINK,)
    return ()


def ref_log_probs(case: Case) -> list[torch.Tensor]:
    """Reference-policy log-probs (float32 values): oracle log-probs minus offsets in +-0.4 (``far``:
    +-``FAR_REFERENCE``).

    Where an estimator has a kink (``abs`` at ``logp == ref``, ``low_var_kl``'s
    saturation) the offsets keep the clip-boundary margin from it, like the
    clip boundaries.
    """
    opts = loss_options(case)
    with torch.no_grad():
        logits = case.global_logits()
        oracle = per_sample_log_probs(case, logits.double(), token.log_probs)
        kinks = _kinks(opts.kl_kind)
        margin = boundary_margin(case, logits, oracle) if kinks else 0.0
        spread = _spread(case, "reference", 0.4, FAR_REFERENCE)
        g = case.generator(_STREAM_REF)
        out = []
        for lp in oracle:
            offset = (torch.rand(lp.shape[0], generator=g, dtype=torch.float64) - 0.5) * 2 * spread
            if margin and margin < MAX_MARGIN:
                offset = _away_from(offset, kinks, margin)
            out.append((lp - offset).float().double())
        return out


def _log_weight_statistics(log_w: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """What the cap and floor compare with: per token, the masked sum (sequence) or mean (geometric)."""
    if level == "token":
        return log_w[mask > 0]
    total = (log_w * mask).sum()
    return (total if level == "sequence" else total / max(float(mask.sum()), 1.0)).reshape(1)


def rollout_log_probs(case: Case) -> list[torch.Tensor]:
    """Rollout-engine log-probs (float32 values): ``old - log w``, log-weights in +-1 (per token).

    At the sequence level the per-token log-weights are scaled by ``1/sqrt(n)``
    so that the sample's product stays near the cap and floor; the
    (token, sum or mean) log-weight keeps ``ROLLOUT_MARGIN`` from
    ``log cap`` and ``log floor``. Rounding to float32 moves each
    log-weight by up to half an ulp of ``old``: at logit scales where that
    eats half the margin this raises (the strategies keep rollout cases at
    moderate scales) instead of testing rounding.
    """
    opts = loss_options(case)
    boundaries = [math.log(opts.rollout_cap)] + ([math.log(opts.rollout_floor)] if opts.rollout_floor else [])
    old = as_sent(old_log_probs(case))
    g = case.generator(_STREAM_ROLLOUT)
    out = []
    spread = _spread(case, "rollout", 1.0, FAR_ROLLOUT)
    for o, mask in zip(old, case.loss_masks(), strict=True):
        mask = mask.double()
        log_w = (torch.rand(o.shape[0], generator=g, dtype=torch.float64) - 0.5) * 2.0 * spread
        count = float(mask.sum())
        if opts.rollout_level == "token":
            log_w = _away_from(log_w, boundaries, ROLLOUT_MARGIN)
        elif opts.rollout_level == "sequence" and count:
            log_w = log_w / math.sqrt(count)
            total = (log_w * mask).sum()
            log_w = log_w + (_away_from(total, boundaries, ROLLOUT_MARGIN) - total) * mask / count
        elif count:
            log_w = _shift_sample_mean(log_w, mask, boundaries, ROLLOUT_MARGIN)
        rollout = (o - log_w).float().double()
        stats = _log_weight_statistics(o - rollout, mask, opts.rollout_level)
        if stats.numel() and any(float((stats - b).abs().min()) < ROLLOUT_MARGIN / 2 for b in boundaries):
            raise ValueError(
                f"rollout log-probs of a Case at logit_scale={case.logit_scale}: float32 rounding moves a "
                "log-weight within half ROLLOUT_MARGIN of the cap/floor; draw rollout cases at logit_scale <= 30"
            )
        out.append(rollout)
    return out
