"""The policy loss from per-token log-probs already computed: ``[B, R]`` response matrices.

Most trainers' loss functions (verl's ``compute_policy_loss_*`` + ``agg_loss``,
TRL's and ms-swift's GRPO loss) receive the log-probs, not the logits: row
``i`` of every matrix is sample ``i``'s response, left-aligned and padded to
the batch's longest response ``R``, and ``loss_mask`` is 0 on the padding as
on every masked response position. This entry point computes the same loss
as ``impl.policy_loss.policy_loss`` on those rows (one composition,
``loss_from_log_probs``), so every option (GSPO, CISPO, dual clip, KL term,
rollout corrections, aggregation) means the same at both levels.

What the matrix form adds, and what it must not change: a padded position is
a masked position, so the normalisers (a sample's token count, the batch's)
come from ``loss_mask`` alone, never from the width ``R``; an empty response
is a row of padding; ``R = 0`` (every response empty) is a valid batch whose
loss is 0. The batch is the whole batch: there is no context parallelism
here (a CP trainer gathers its samples, or calls the packed entry).
"""

from __future__ import annotations

import torch

from .policy_loss import loss_from_log_probs
from .policy_terms import LossTerms


def token_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    eps_clip: float = 0.2,
    eps_clip_high: float | None = None,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    terms: LossTerms | None = None,
    ref_log_probs: torch.Tensor | None = None,
    rollout_log_probs: torch.Tensor | None = None,
) -> torch.Tensor:
    """``agg(pg) + kl_coef agg(kl) - entropy_coef agg(H)`` over ``[B, R]`` matrices (see the module docstring).

    Args:
        log_probs: ``[B, R]`` log-probs of the policy being trained (the gradient flows into it).
        old_log_probs, advantages: ``[B, R]``, no gradient taken.
        loss_mask: ``[B, R]`` 0/1; 0 on padding and on every position the loss ignores.
        entropy: ``[B, R]`` or None (no bonus term); its gradient is ``-entropy_coef d agg(H)/dH``.
        terms: the loss's options (``impl.policy_terms.LossTerms``; None: PPO-clip, ``sum-of-sample-mean``).
        ref_log_probs: ``[B, R]``, needed when ``terms.kl_coef != 0``.
        rollout_log_probs: ``[B, R]``, needed with a rollout correction.

    Returns:
        The scalar loss.
    """
    terms = terms if terms is not None else LossTerms()
    _check_arguments(
        terms,
        log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        loss_mask=loss_mask,
        entropy=entropy,
        ref_log_probs=ref_log_probs,
        rollout_log_probs=rollout_log_probs,
    )
    masks = list(loss_mask.to(log_probs.device).unbind(0))

    def rows(matrix):
        return None if matrix is None else list(matrix.unbind(0))

    return loss_from_log_probs(
        terms,
        rows(log_probs),
        rows(entropy),
        old_log_probs=rows(old_log_probs),
        advantages=rows(advantages),
        masks=masks,
        full_masks=masks,
        eps_clip=eps_clip,
        eps_clip_high=eps_clip if eps_clip_high is None else eps_clip_high,
        entropy_coef=entropy_coef,
        cp_group=None,
        ref_log_probs=rows(ref_log_probs),
        rollout_log_probs=rows(rollout_log_probs),
    )


def _check_arguments(terms: LossTerms, log_probs, **named) -> None:
    """Raise a ValueError naming the first bad argument: invalid options, a missing input, a shape unlike log_probs'."""
    problems = terms.problems()
    if terms.kl_coef != 0 and named["ref_log_probs"] is None:
        problems.append(f"kl_coef={terms.kl_coef} needs ref_log_probs= (the reference policy's log-probs)")
    if terms.rollout_correction is not None and named["rollout_log_probs"] is None:
        problems.append(f"rollout_correction={terms.rollout_correction!r} needs rollout_log_probs= (the rollout's)")
    if problems:
        raise ValueError("token_policy_loss: " + "; ".join(problems))
    if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 2:
        raise ValueError(f"token_policy_loss: log_probs must be a [B, R] tensor, got {_shape(log_probs)}")
    for name, value in named.items():
        if value is None:
            continue
        if not isinstance(value, torch.Tensor) or value.shape != log_probs.shape:
            raise ValueError(
                f"token_policy_loss: {name} must have log_probs' shape {tuple(log_probs.shape)}, got {_shape(value)}"
            )


def _shape(value) -> str:
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__
