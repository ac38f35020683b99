"""Parent-side references for a Case: float64 oracle and naive same-dtype results.

The oracle (``precise=True``) runs the float64 functions of ``oracles/`` on
the unsharded problem; the naive computation (``precise=False``) runs plain
torch ``log_softmax`` in the Case's dtype. The tolerance policy bounds the
target's error by a multiple of the naive one (FlashAttention's approach),
so both are produced by the same code path here, differing only in the
per-token functions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from harness.cases import policy
from harness.cases.case import Case
from oracles import layout, losses, token
from oracles import policy as policy_oracle


@dataclass
class Reference:
    """Per-token or per-sample values and the gradient of a loss w.r.t. the global logits."""

    log_probs: object
    entropy: object
    grad: torch.Tensor
    loss: torch.Tensor | None = None


def _leaf(case: Case, precise: bool) -> torch.Tensor:
    logits = case.global_logits()
    return (logits.double() if precise else logits.clone()).requires_grad_()


def _per_token(case: Case, precise: bool):
    if precise:
        return token.log_probs, token.entropy
    return token.naive_log_probs, token.naive_entropy


def _grad_of(loss: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    if not loss.requires_grad:
        return torch.zeros_like(logits)
    (grad,) = torch.autograd.grad(loss, logits)
    return grad


def token_reference(case: Case, precise: bool = True) -> Reference:
    """Every row's log-prob/entropy and the gradient of ``sum(a*lp + b*H)``."""
    logits = _leaf(case, precise)
    log_probs_fn, entropy_fn = _per_token(case, precise)
    log_probs = log_probs_fn(logits, case.row_targets(), case.temperature).double()
    entropy = entropy_fn(logits, case.temperature).double() if case.with_entropy else None
    a, b = case.row_probe_weights()
    loss = (a * log_probs).sum() + ((b * entropy).sum() if entropy is not None else 0.0)
    return Reference(log_probs.detach(), None if entropy is None else entropy.detach(), _grad_of(loss, logits))


def _packed_values(case: Case, logits: torch.Tensor, precise: bool):
    """Per-sample (log_probs, entropy) lists from the global logits (the oracle's rows and targets)."""
    log_probs_fn, entropy_fn = _per_token(case, precise)
    picked = losses.per_sample(logits, case.response_rows())
    targets = layout.response_targets(case.tokens(), case.response_lengths)
    log_probs = [log_probs_fn(z, y, case.temperature).double() for z, y in zip(picked, targets, strict=True)]
    if not case.with_entropy:
        return log_probs, None
    return log_probs, [entropy_fn(z, case.temperature).double() for z in picked]


def packed_reference(case: Case, precise: bool = True) -> Reference:
    """Per-sample outputs and the gradient of the probe loss (docs/math.md)."""
    logits = _leaf(case, precise)
    log_probs, entropy = _packed_values(case, logits, precise)
    a, b = case.probe_weights()
    loss = losses.probe_loss(log_probs, entropy, a, b if entropy is not None else None)
    grad = _grad_of(loss, logits)
    return Reference([v.detach() for v in log_probs], None if entropy is None else [v.detach() for v in entropy], grad)


def policy_reference(case: Case, precise: bool = True) -> Reference:
    """The Case's policy loss (``harness.cases.policy.loss_options``) and its gradient w.r.t. the global logits.

    The behaviour, reference and rollout log-probs are read as the target receives them (float32).
    """
    logits = _leaf(case, precise)
    log_probs, entropy = _packed_values(case, logits, precise)
    opts = policy.loss_options(case)
    loss = policy_oracle.policy_loss(
        log_probs,
        policy.as_sent(policy.old_log_probs(case)),
        case.advantages(),
        case.loss_masks(),
        opts,
        ref=policy.ref_log_probs(case) if opts.kl_coef != 0 else None,
        rollout=policy.rollout_log_probs(case) if opts.rollout_correction else None,
        entropy=entropy,
    )
    grad = _grad_of(loss, logits)
    return Reference(
        [v.detach() for v in log_probs], None if entropy is None else [v.detach() for v in entropy], grad, loss.detach()
    )


def shared_logits_reference(case: Case) -> Reference:
    """Oracle for ``harness.jobs.logits.shared_logits_job``: its five outputs and the gradient of their loss."""
    logits = _leaf(case, True)
    targets = case.row_targets()
    log_probs = token.log_probs(logits, targets, case.temperature)
    entropy = token.entropy(logits, case.temperature)
    a, b = case.row_probe_weights()
    loss = (
        (a * log_probs).sum()
        + (b * entropy).sum()
        + (a * log_probs).sum()
        + (a[1:] * log_probs[1:]).sum()
        + (b[1:] * entropy[1:]).sum()
    )
    values = [log_probs.detach(), entropy.detach(), log_probs.detach(), log_probs[1:].detach(), entropy[1:].detach()]
    return Reference(values, None, _grad_of(loss, logits))


def entropy_bonus_grad(case: Case) -> torch.Tensor:
    """d agg(H) / d logits in float64 (the gradient the entropy bonus adds, per unit coef; the Case's aggregation)."""
    logits = _leaf(case, True)
    _, entropy = _packed_values(case.with_(with_entropy=True), logits, True)
    opts = policy.loss_options(case)
    return _grad_of(policy_oracle.aggregate(entropy, case.loss_masks(), opts.aggregation, opts.horizon), logits)


def kl_term_grad(case: Case) -> torch.Tensor:
    """d agg(kl) / d logits in float64 (the gradient the KL term adds, per unit ``kl_coef``).

    The oracle's loss with zero advantages (a policy term with neither value
    nor gradient), ``kl_coef = 1`` and no entropy: only the KL term is left.
    """
    logits = _leaf(case, True)
    log_probs, _ = _packed_values(case.with_(with_entropy=False), logits, True)
    opts = replace(policy.loss_options(case), kl_coef=1.0, entropy_coef=0.0)
    loss = policy_oracle.policy_loss(
        log_probs,
        policy.as_sent(policy.old_log_probs(case)),
        [torch.zeros_like(a) for a in case.advantages()],
        case.loss_masks(),
        replace(opts, rollout_correction=None),
        ref=policy.ref_log_probs(case),
    )
    return _grad_of(loss, logits)
