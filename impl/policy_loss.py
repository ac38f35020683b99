"""The trainer-facing entry point: the policy loss (PPO clip by default) with an entropy bonus.

This is where the entropy-gradient gate is decided (docs/bugs.md, bug 1, slime
PR #1185): the entropy needs a graph exactly when it is requested AND its
coefficient is non-zero. Getting the condition backwards made the entropy
bonus silently do nothing while keeping the ``[rows, V]`` graph it was meant
to drop, so the decision lives in one named function.

The loss's options (GSPO, CISPO, dual clip, KL term, rollout corrections,
aggregation modes) are computed from the log-probs in ``impl.policy_terms``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .batch import PackedBatch
from .context_parallel import zigzag_positions
from .packed import log_probs_and_entropy as packed_log_probs_and_entropy
from .policy_terms import LossTerms, aggregate, kl_terms, pg_terms, rollout_weights
from .row_stats import tp_world


def need_entropy_grad(with_entropy: bool, entropy_coef: float) -> bool:
    """The entropy keeps its graph iff it is computed and its coefficient is non-zero."""
    return bool(with_entropy) and entropy_coef != 0


def sample_views(batch: PackedBatch, cp_mode: str, cp_group) -> list | None:
    """Per sample, the response indices this CP rank returns (None without context parallelism)."""
    if cp_mode == "none":
        return None
    cp, cp_rank = tp_world(cp_group)
    return [
        torch.tensor(zigzag_positions(total, response, cp, cp_rank), dtype=torch.long)
        for total, response in zip(batch.total_lengths, batch.response_lengths)
    ]


@dataclass
class PolicyLossOutput:
    """The loss and the per-sample quantities it was built from."""

    loss: torch.Tensor
    log_probs: list
    entropy: list | None
    entropy_grad: bool


def policy_loss(
    logits: torch.Tensor,
    batch: PackedBatch,
    *,
    advantages: list,
    old_log_probs: list,
    eps_clip: float = 0.2,
    eps_clip_high: float | None = None,
    entropy_coef: float = 0.0,
    with_entropy: bool = True,
    tp_group=None,
    chunk_size: int | None = None,
    temperature: float = 1.0,
    response_only: bool = False,
    loss_mask_only: bool = False,
    cp_group=None,
    cp_mode: str = "none",
    terms: LossTerms | None = None,
    ref_log_probs: list | None = None,
    rollout_log_probs: list | None = None,
) -> PolicyLossOutput:
    """The policy-gradient loss, plus the KL term, minus the entropy bonus, each aggregated the same way.

    Default (``terms`` None): ``sum_of_sample_mean(max(-A r, -A clip(r, 1-eps, 1+eps_high)))
    - entropy_coef * sum_of_sample_mean(H)`` with ``r = exp(logp - old_logp)``
    and the batch's loss masks (all ones when absent). ``terms`` picks the
    policy-gradient kind, dual clip, rollout correction (``rollout_log_probs``),
    KL term (``ref_log_probs``) and aggregation (``impl.policy_terms``).

    Under context parallelism (``cp_mode`` zigzag/allgather) the advantages
    and old (reference, rollout) log-probs are this CP rank's zigzag view of
    each sample, and the returned loss is this rank's share: the CP ranks'
    losses sum to the batch's loss, and each rank's backward yields its
    logits' gradient of that sum.
    """
    terms = terms if terms is not None else LossTerms()
    if eps_clip_high is None:
        eps_clip_high = eps_clip
    full_masks = batch.loss_masks if batch.loss_masks is not None else [torch.ones(r) for r in batch.response_lengths]
    full_masks = [mask.to(logits.device) for mask in full_masks]
    views = sample_views(batch, cp_mode, cp_group)
    masks = full_masks if views is None else [mask[view] for mask, view in zip(full_masks, views)]
    caller_error = _caller_error(terms, masks, views, advantages, old_log_probs, ref_log_probs, rollout_log_probs)
    entropy_grad = need_entropy_grad(with_entropy, entropy_coef)
    out = packed_log_probs_and_entropy(
        logits,
        batch,
        tp_group=tp_group,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
        temperature=temperature,
        response_only=response_only,
        loss_mask_only=loss_mask_only,
        cp_group=cp_group,
        cp_mode=cp_mode,
        caller_error=caller_error,
    )
    loss = loss_from_log_probs(
        terms,
        out.log_probs,
        out.entropy,
        old_log_probs=old_log_probs,
        advantages=advantages,
        masks=masks,
        full_masks=full_masks,
        eps_clip=eps_clip,
        eps_clip_high=eps_clip_high,
        entropy_coef=entropy_coef,
        cp_group=cp_group if cp_mode != "none" else None,
        ref_log_probs=ref_log_probs,
        rollout_log_probs=rollout_log_probs,
    )
    return PolicyLossOutput(loss=loss, log_probs=out.log_probs, entropy=out.entropy, entropy_grad=entropy_grad)


def loss_from_log_probs(
    terms: LossTerms,
    log_probs: list,
    entropy: list | None,
    *,
    old_log_probs: list,
    advantages: list,
    masks: list,
    full_masks: list,
    eps_clip: float,
    eps_clip_high: float,
    entropy_coef: float,
    cp_group,
    ref_log_probs: list | None,
    rollout_log_probs: list | None,
) -> torch.Tensor:
    """The policy term (rollout-weighted), plus the KL term, minus the entropy bonus, each aggregated alike.

    The one composition both entry points share: ``policy_loss`` (from logits,
    per-sample lists in this CP rank's view, ``full_masks`` the whole samples')
    and ``impl.token_policy_loss`` (the rows of ``[B, R]`` matrices, where the
    view is the whole sample). ``entropy`` None: no bonus term.
    """
    counts = [mask.sum() for mask in full_masks]

    def agg(values):
        return aggregate(values, masks, counts, terms.aggregation, full_masks, terms.horizon)

    pg = pg_terms(terms, log_probs, old_log_probs, advantages, masks, counts, eps_clip, eps_clip_high, cp_group)
    if terms.rollout_correction is not None:
        weights = rollout_weights(terms, old_log_probs, rollout_log_probs, masks, counts, cp_group, log_probs)
        pg = [p * w for p, w in zip(pg, weights)]
    loss = agg(pg)
    if terms.kl_coef != 0:
        kl = kl_terms(terms.kl_kind, log_probs, ref_log_probs, masks)
        if terms.kl_ratio_weighted:
            kl = [k * torch.exp(lp - old.to(lp)) for k, lp, old in zip(kl, log_probs, old_log_probs)]
        loss = loss + terms.kl_coef * agg(kl)
    if entropy is not None:
        loss = loss - entropy_coef * agg(entropy)
    return loss


def _caller_error(terms: LossTerms, masks, views, advantages, old_log_probs, ref_log_probs, rollout_log_probs):
    """The first problem with the caller's arguments on this rank (raised after the CP ranks agree), or None."""
    problems = terms.problems()
    if terms.kl_coef != 0 and ref_log_probs is None:
        problems.append(f"kl_coef={terms.kl_coef} needs ref_log_probs= (the reference policy's log-probs)")
    if terms.rollout_correction is not None and rollout_log_probs is None:
        problems.append(f"rollout_correction={terms.rollout_correction!r} needs rollout_log_probs= (the rollout's)")
    if problems:
        return ValueError("policy_loss: " + "; ".join(problems))
    expected = [int(mask.shape[0]) for mask in masks]
    named = {"advantages": advantages, "old_log_probs": old_log_probs}
    named.update({"ref_log_probs": ref_log_probs} if terms.kl_coef != 0 else {})
    named.update({"rollout_log_probs": rollout_log_probs} if terms.rollout_correction is not None else {})
    for name, values in named.items():
        lengths = [int(v.shape[0]) for v in values]
        if lengths != expected:
            where = "response_lengths" if views is None else "this CP rank's zigzag view of each sample"
            return ValueError(f"{name} lengths {lengths} must equal {where}: {expected}")
    return None
