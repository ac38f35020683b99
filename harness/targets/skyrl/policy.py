"""SkyRL's PPO policy loss presented as the harness's ``policy_loss`` (the SkyRL record's policy entry).

What runs is SkyRL's own code, loaded by the SkyRL record (``family.py``):

* ``skyrl/backends/skyrl_train/utils/ppo_utils.py``: the clipped PG loss is
  ``PolicyLossRegistry.get("regular")`` (``ppo_policy_loss``, what SkyRL's
  trainer resolves for ``policy_loss_type="regular"``) and the loss reduction
  is ``apply_loss_reduction_to_advantages_minibatch`` (SkyRL reduces a policy
  loss by PRE-SCALING the advantages and then summing ``loss * loss_mask``).
  Its import-time dependencies (Ray, loguru, jaxtyping, omegaconf, numpy, the
  trainer config) are placeholders (``harness.targets.skyrl.stand_ins``); its sibling utility
  modules (``torch_utils``, ``off_policy_correction_utils``) are SkyRL's own,
  executed by the loader (no ``__init__`` runs).
* the entropy gate and whether the entropy term enters the loss come from the
  Megatron model wrapper (``workers/megatron/megatron_model_wrapper.py``),
  whose ``loss_func`` needs a Megatron model and cannot run here: both steps
  are compiled from its source and evaluated with ``loss_config`` bound to the
  adapter's settings (``wrapper.py``), so the gate the harness checks
  (docs/bugs.md #1) is the one written in SkyRL's file. In 0.3.0 both are
  ``loss_config.use_entropy_loss``.

Mapping onto the harness's policy loss (docs/math.md):

* settings: ``policy_loss_type="regular"``, ``eps_clip_low`` / ``eps_clip_high``
  = the harness's ``eps_clip`` / ``eps_clip_high``, no KL loss, no rollout
  log-probs (so no off-policy correction), ``use_entropy_loss = with_entropy
  and entropy_coef != 0`` with ``entropy_loss_coef = entropy_coef`` (SkyRL
  keeps the flag and the coefficient apart; a SkyRL run asks for an entropy
  bonus of ``c`` with the flag on and ``c``, and for none with the flag off,
  its default);
* reduction: the harness's ``sum_of_sample_mean`` (per-sample masked mean,
  summed) is not one of SkyRL's reductions. Its ``sequence_mean`` is the MEAN
  over the batch of the per-sample masked means (advantages divided by
  ``B * max(mask count, 1)``); the PPO objective is positively homogeneous in
  the advantage, so ``B * sequence_mean`` equals ``sum_of_sample_mean``
  exactly (up to rounding). The adapter runs SkyRL's ``sequence_mean`` and
  multiplies the loss by ``B``;
* the entropy term: SkyRL's wrapper uses a batch-wide TOKEN mean of the
  entropy (``vocab_parallel_entropy_packed_sequences`` / ``masked_mean``),
  which is not the harness's per-sample mean and is not equal to it. The
  adapter therefore builds ``entropy_loss_coef * sum_of_sample_mean(H)`` itself
  from SkyRL's per-token entropy (``vocab_parallel_entropy``), summed in fp32
  (the term is the adapter's arithmetic, so its rounding must not be charged
  to SkyRL); only the gate
  and the term's condition are SkyRL's;
* tensors are SkyRL's ``[B, R_max]`` action layout: row ``i`` holds sample
  ``i``'s response log-probs (from SkyRL's packed output, positions
  ``[P_i − 1, T_i − 1)``), zero-padded with loss mask 0;
* context parallelism: SkyRL gathers every sequence's log-probs onto every CP
  rank and computes the whole batch's loss on each, leaving the CP scaling to
  Megatron's schedule. The harness wants each CP rank's SHARE, its losses
  adding up to the batch's, and hands each rank only its zigzag view of the
  advantages and old log-probs. So the reduction's pre-scaling uses the full
  loss masks, and the mask passed to ``ppo_policy_loss`` keeps only this
  rank's view positions: the shares sum to the batch's loss, and each rank's
  gradient is its own tokens' (what SkyRL's gather backward keeps).
"""

from __future__ import annotations

import torch

from harness.targets.skyrl import options as skyrl_options
from harness.targets.upstream import packing


def _response_indices(inputs, cp: int, cp_rank: int) -> list[list[int]]:
    """Per sample, the response index (0..R_i−1) of each position of this rank's zigzag view."""
    return [
        [p - (total - response - 1) for p in positions]
        for total, response, positions in zip(
            inputs.total_lengths, inputs.response_lengths, packing.view_positions(inputs, cp, cp_rank)
        )
    ]


def _scatter(values, indices, shape, like) -> torch.Tensor:
    """``[B, R_max]`` zeros with each sample's view values at their response indices (differentiable)."""
    out = torch.zeros(shape, dtype=like.dtype, device=like.device)
    for i, (value, index) in enumerate(zip(values, indices)):
        if index:
            rows = torch.full((len(index),), i, device=out.device)
            out = out.index_put((rows, torch.tensor(index, device=out.device)), value.to(out.device, out.dtype))
    return out


def _whole_batch(values, indices, shape, like, cp_group) -> torch.Tensor:
    """``[B, R_max]`` of per-sample view values summed over the CP group: every rank's part (views are disjoint)."""
    full = _scatter([v.detach() for v in values], indices, shape, like)
    if cp_group is not None and torch.distributed.is_initialized() and torch.distributed.get_world_size(cp_group) > 1:
        torch.distributed.all_reduce(full, group=cp_group)
    return full


def aggregate_views(values, indices, masks, aggregation, horizon, like) -> torch.Tensor:
    """The harness's aggregation of per-sample view values (the adapter's arithmetic, in fp32; this rank's share)."""
    total = torch.zeros((), device=like.device)
    counts = [m.float().sum().clamp(min=1.0).to(like.device) for m in masks]
    for value, index, mask, count in zip(values, indices, masks, counts):
        term = (value.float() * mask.float().to(value.device)[index]).sum()
        total = total + (term / count if aggregation in ("sum-of-sample-mean", "seq-mean-token-mean") else term)
    if aggregation == "token-mean":
        return total / max(float(sum(m.float().sum() for m in masks)), 1.0)
    if aggregation in ("seq-mean-token-mean", "seq-mean-token-sum"):
        return total / max(len(masks), 1)
    if aggregation == "seq-mean-token-sum-norm":
        return total / (max(len(masks), 1) * horizon)
    return total


def policy_loss(
    up,
    steps,
    unpacked,
    entropy_rows,
    inputs,
    *,
    advantages,
    old_log_probs,
    settings,
    cp,
    cp_rank,
    options=None,
    cp_group=None,
):
    """The loss from SkyRL's packed output ``unpacked`` ``[B, U − 1]`` and per-row entropy (see the docstring).

    Returns ``(loss, per-sample entropy views or None)``; ``entropy_rows`` is the per-row entropy of this rank's
    stream computed under the wrapper's gate, or None. ``options`` (``PolicyOptions``): the loss type,
    reduction, rollout correction and KL term of ``settings`` (``harness.targets.skyrl.options``); a
    sequence-level statistic under CP reads every rank's old/rollout log-probs (summed over ``cp_group``)
    and the full loss mask, this rank's share coming from its advantages alone (zero elsewhere).
    """
    batch = len(inputs.total_lengths)
    longest = max(inputs.response_lengths, default=0)
    shape = (batch, longest)
    device = unpacked.device
    aggregation = "sum-of-sample-mean" if options is None else options.aggregation
    action_log_probs = torch.zeros(shape, dtype=unpacked.dtype, device=device)
    full_mask = torch.zeros(shape, dtype=torch.float32, device=device)
    for i, (total, response) in enumerate(zip(inputs.total_lengths, inputs.response_lengths)):
        if response:
            action_log_probs = action_log_probs.index_put(
                (torch.full((response,), i, device=device), torch.arange(response, device=device)),
                unpacked[i, total - response - 1 : total - 1],
            )
            full_mask[i, :response] = inputs.loss_masks[i].float().to(device)
    indices = _response_indices(inputs, cp, cp_rank)
    mine = _scatter([torch.ones(len(index), device=device) for index in indices], indices, shape, full_mask)
    whole = skyrl_options.needs_whole_samples(options) and cp > 1
    like = action_log_probs.detach()
    if whole:
        old = _whole_batch(old_log_probs, indices, shape, like, cp_group)
        loss_mask = full_mask
    else:
        old = _scatter(old_log_probs, indices, shape, like)
        loss_mask = full_mask * mine
    rollout = None
    if options is not None and options.rollout_log_probs is not None:
        place = _whole_batch if whole else _scatter_detached
        rollout = place(options.rollout_log_probs, indices, shape, like, cp_group)
    raw_advantages = _scatter(advantages, indices, shape, full_mask)
    scaled = up.apply_loss_reduction_to_advantages_minibatch(
        raw_advantages,
        full_mask,
        settings.loss_reduction,
        micro_batch_size=batch,
        max_seq_len=int(options.horizon) if aggregation == "seq-mean-token-sum-norm" else longest,
    )
    loss_fn = up.PolicyLossRegistry.get(settings.policy_loss_type)
    pg_loss, _metrics = loss_fn(
        action_log_probs, old, scaled, config=settings, loss_mask=loss_mask, rollout_logprobs=rollout
    )
    loss = pg_loss * batch if aggregation == "sum-of-sample-mean" else pg_loss
    if settings.use_kl_loss:
        ref = _scatter([r.detach() for r in options.ref_log_probs], indices, shape, like)
        kl = up.compute_approx_kl(
            action_log_probs, ref, loss_mask=full_mask * mine, kl_estimator_type=settings.kl_estimator_type
        )
        kl_views = [kl[i, index] for i, index in enumerate(indices)]
        term = aggregate_views(kl_views, indices, inputs.loss_masks, aggregation, options.horizon, like)
        loss = loss + settings.kl_loss_coef * term
    entropy = None
    if entropy_rows is not None:
        entropy = packing.per_sample_rows(entropy_rows, inputs, cp, cp_rank)
        if steps.term_added(settings):
            horizon = None if options is None else options.horizon
            term = aggregate_views(entropy, indices, inputs.loss_masks, aggregation, horizon, like)
            loss = loss - settings.entropy_loss_coef * term
    return loss, entropy


def _scatter_detached(values, indices, shape, like, cp_group=None) -> torch.Tensor:
    """This rank's view values in ``[B, R_max]`` (``_whole_batch``'s signature, no CP sum)."""
    return _scatter([v.detach() for v in values], indices, shape, like)
