"""The trainer-facing entry point: PPO clipped policy loss with an entropy bonus.

This is where the entropy-gradient gate is decided (docs/bugs.md, bug 1, slime
PR #1185): the entropy needs a graph exactly when it is requested AND its
coefficient is non-zero. Getting the condition backwards made the entropy
bonus silently do nothing while keeping the ``[rows, V]`` graph it was meant
to drop, so the decision lives in one named function.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .batch import PackedBatch
from .context_parallel import zigzag_positions
from .packed import log_probs_and_entropy as packed_log_probs_and_entropy
from .row_stats import tp_world


def need_entropy_grad(with_entropy: bool, entropy_coef: float) -> bool:
    """The entropy keeps its graph iff it is computed and its coefficient is non-zero."""
    return bool(with_entropy) and entropy_coef != 0


def sum_of_sample_mean(values: list, masks: list, counts: list | None = None) -> torch.Tensor:
    """Sum over samples of each sample's masked mean; an all-masked sample adds 0.

    ``counts`` are the per-sample token counts to divide by: under context
    parallelism a rank holds only part of each sample, and its partial sums
    are divided by the WHOLE sample's count so that the CP ranks' losses add
    up to the loss of the whole batch.
    """
    total = None
    for i, (value, mask) in enumerate(zip(values, masks)):
        mask = mask.to(value.dtype)
        count = mask.sum() if counts is None else counts[i].to(value.dtype)
        term = (value * mask).sum() / count.clamp(min=1)
        total = term if total is None else total + term
    if total is None:
        return torch.zeros(())
    return total


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
) -> PolicyLossOutput:
    """PPO clipped policy-gradient loss, ``sum_of_sample_mean``, minus the entropy bonus.

    ``loss = sum_of_sample_mean(max(-A r, -A clip(r, 1-eps, 1+eps_high)))
    - entropy_coef * sum_of_sample_mean(H)`` with ``r = exp(logp - old_logp)``
    and the batch's loss masks (all ones when absent).

    Under context parallelism (``cp_mode`` zigzag/allgather) the advantages
    and old log-probs are this CP rank's zigzag view of each sample, and the
    returned loss is this rank's share: the CP ranks' losses sum to the
    batch's loss, and each rank's backward yields its logits' gradient of
    that sum.
    """
    if eps_clip_high is None:
        eps_clip_high = eps_clip
    full_masks = batch.loss_masks if batch.loss_masks is not None else [torch.ones(r) for r in batch.response_lengths]
    full_masks = [mask.to(logits.device) for mask in full_masks]
    views = sample_views(batch, cp_mode, cp_group)
    masks = full_masks if views is None else [mask[view] for mask, view in zip(full_masks, views)]
    expected = [int(mask.shape[0]) for mask in masks]
    caller_error = None  # raised after the CP ranks agree (impl.agreement), so no peer is left waiting
    for name, values in (("advantages", advantages), ("old_log_probs", old_log_probs)):
        lengths = [int(v.shape[0]) for v in values]
        if lengths != expected and caller_error is None:
            where = "response_lengths" if views is None else "this CP rank's zigzag view of each sample"
            caller_error = ValueError(f"{name} lengths {lengths} must equal {where}: {expected}")
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
    counts = [mask.sum() for mask in full_masks]
    pg_losses = []
    for log_prob, old, advantage, mask in zip(out.log_probs, old_log_probs, advantages, masks):
        # Masked tokens get ratio 1: a dropped (loss-mask-only) position reads 0,
        # and exp(0 - old) could overflow into inf * 0 = NaN.
        ratio = torch.exp(torch.where(mask > 0, log_prob - old.to(log_prob), 0.0))
        advantage = advantage.to(log_prob)
        clipped = ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
        pg_losses.append(torch.maximum(-advantage * ratio, -advantage * clipped))
    loss = sum_of_sample_mean(pg_losses, masks, counts)
    if with_entropy:
        loss = loss - entropy_coef * sum_of_sample_mean(out.entropy, masks, counts)
    return PolicyLossOutput(loss=loss, log_probs=out.log_probs, entropy=out.entropy, entropy_grad=entropy_grad)
