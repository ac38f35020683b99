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
"""

from __future__ import annotations

import math

import torch

from harness.cases.case import Case
from oracles import layout, losses, token

EPS_CLIP = 0.2
EPS_CLIP_HIGH = 0.28
_BOUNDARIES = (math.log(1 - EPS_CLIP), math.log(1 + EPS_CLIP_HIGH))
MAX_MARGIN = 0.2  # under half the clip window log(1 + EPS_CLIP_HIGH) - log(1 - EPS_CLIP) = 0.47: the zones stay apart


def _per_sample_log_probs(case: Case, logits: torch.Tensor, log_probs_fn) -> list[torch.Tensor]:
    """``log_probs_fn`` over each sample's response rows and targets (the oracle's layout)."""
    picked = losses.per_sample(logits, case.response_rows())
    targets = layout.response_targets(case.tokens(), case.response_lengths)
    return [log_probs_fn(z, y, case.temperature) for z, y in zip(picked, targets, strict=True)]


def boundary_margin(case: Case, logits: torch.Tensor, oracle: list[torch.Tensor]) -> float:
    """The tolerance policy's log-prob bound for ``case`` (see the module docstring); ``logits`` in its dtype."""
    naive = _per_sample_log_probs(case, logits, token.naive_log_probs)
    naive_err = max((float((n.double() - o).abs().max()) for n, o in zip(naive, oracle) if o.numel()), default=0.0)
    finite = logits[torch.isfinite(logits)]
    scale = float(finite.abs().max()) / case.temperature if finite.numel() else 0.0
    largest = max((float(o.abs().max()) for o in oracle if o.numel()), default=0.0)
    fp32_eps, out_eps = torch.finfo(torch.float32).eps, torch.finfo(case.torch_dtype).eps
    return 8.0 * (fp32_eps * scale + out_eps * largest) + 2.0 * naive_err


def _away_from_boundaries(log_ratio: torch.Tensor, margin: float) -> torch.Tensor:
    if margin >= MAX_MARGIN:
        return log_ratio
    for boundary in _BOUNDARIES:
        near = (log_ratio - boundary).abs() < margin
        side = torch.where(log_ratio >= boundary, 1.0, -1.0).to(log_ratio.dtype)
        log_ratio = torch.where(near, boundary + side * margin, log_ratio)
    return log_ratio


def old_log_probs(case: Case) -> list[torch.Tensor]:
    """Behaviour-policy log-probs: oracle log-probs minus bounded log-ratios (ratios near 1, some clipped)."""
    with torch.no_grad():
        logits = case.global_logits()
        oracle = _per_sample_log_probs(case, logits.double(), token.log_probs)
        margin = boundary_margin(case, logits, oracle)
        return [
            lp - _away_from_boundaries(-offset, margin)
            for lp, offset in zip(oracle, case.old_log_prob_offsets(), strict=True)
        ]
