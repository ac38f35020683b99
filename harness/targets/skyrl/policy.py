"""SkyRL's ``ppo_utils.py`` as the harness's ``policy_loss``, on SkyRL's ``[B, R_max]`` action layout.

Two forms of SkyRL's reduction. Since #1296 (2026-03-31) it PRE-SCALES the advantages
(``apply_loss_reduction_to_advantages_minibatch``) and each registry loss is a masked sum; before, each registry loss
reduces itself (``reduce_loss(loss, loss_mask, config.loss_reduction, config.max_seq_len)``). ``sum-of-sample-mean``
is ``B`` times SkyRL's ``sequence_mean`` in both (PPO is positively homogeneous in the advantages). Its KL term (a
per-sample mean whatever ``loss_reduction`` says) and entropy term (a token mean) are not the harness's aggregation,
so both are the adapter's arithmetic (``aggregate_views``, fp32) on SkyRL's values. SkyRL computes the whole batch's
loss on every CP rank, the harness wants each rank's SHARE, by linearity: the advantages of this rank's view only (a
zero advantage zeroes every SkyRL loss kind's term), the denominators from the full loss masks (the pre-scaling's, or
in the self-reducing form the loss mask ``reduce_loss`` divides by); a sequence-level statistic (GSPO's ratio, a
sequence rollout weight) reads every rank's log-probs. Whether the entropy term enters is the wrapper's
(``wrapper.py``).
"""

from __future__ import annotations

import logging
from typing import Annotated

import torch
import torch.distributed as dist
from torch.nn.utils.rnn import pad_sequence

from harness.targets.protocol import PolicyOptions
from harness.targets.upstream import packing
from harness.targets.upstream.family import Option, configured
from harness.targets.upstream.placeholders import RAY_WITHOUT_CLUSTER, Placeholder, holding
from harness.targets.upstream.settings import StrictSettings

AGGREGATIONS = {
    "sum-of-sample-mean": "sequence_mean",  # times B (the adapter); the default, no option declares it
    "seq-mean-token-mean": "sequence_mean",
    "token-mean": "token_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",  # max_seq_len: the harness's horizon
}
KL_ESTIMATORS = {"k1": "k1", "k2": "k2", "abs": "abs", "low_var_kl": "k3"}
LOSS_TYPES = {"ppo": "regular", "gspo": "gspo", "cispo": "cispo"}
ROLLOUT = ("tis_token", "tis_sequence", "mis_token", "mis_sequence", "rs_token", "rs_sequence", "rs_geometric")
PLAIN = PolicyOptions(kl_kind="low_var_kl")  # no options given: plain PPO (SkyRL's default estimator named)


class AlgorithmSettings(StrictSettings):
    """SkyRL's ``cfg.algorithm`` as ``algorithm_settings`` fills it; reading a setting it did not provide raises."""

    READ_AS = "SkyRL config"
    MAPPED_IN = "harness/targets/skyrl/policy.py (algorithm_settings)"


# No cluster: the registry keeps its functions locally (SkyRL's documented behaviour without Ray); ``ray.get`` refuses.
_config = holding(__doc__="harness stand-in (harness/targets/skyrl/policy.py)", AlgorithmConfig=AlgorithmSettings)
# Not cloudpickle (imported under try/except ImportError): SkyRL's own fallback runs. skyrl.train.config even where
# the tree has it (its package pulls in the trainer): a revision reading a setting the adapter does not map fails.
PLACEHOLDERS = (
    Placeholder("ray", "the registry's optional actor sync and @ray.remote", RAY_WITHOUT_CLUSTER),
    Placeholder("loguru", "logging, also inside gspo_policy_loss", holding(logger=logging.getLogger("skyrl")), "call"),
    # Float[torch.Tensor, "b s"] (always two arguments, as jaxtyping requires): an annotated tensor
    Placeholder("jaxtyping", "annotations evaluated at definition time", holding(Float=Annotated, Integer=Annotated)),
    Placeholder("omegaconf", "a type annotation"),
    Placeholder("numpy", "one KL controller's arithmetic, never called here"),
    Placeholder("skyrl.train", "the trainer package, never executed", holding(__path__=[]), replaces=True),
    *(
        Placeholder(name, "AlgorithmConfig, as the adapter's strict settings", _config, replaces=True)
        for name in ("skyrl.train.config", "skyrl_train.config")  # skyrl-train's own (2026-02, before #1139)
    ),
)

SCALES_ADVANTAGES = "apply_loss_reduction_to_advantages_minibatch"  # the reduction in the advantages (#1296)
# MIS and RS reject a token by zeroing it in the loss mask apply_off_policy_correction returns. Before #1296
# reduce_loss divided by that mask, so a rejected token left the denominators, which the harness's MIS and RS keep
# (docs/policy-losses.md): declared only where the reduction is in the advantages.
_REJECTS = ("mis_token", "mis_sequence", "rs_token", "rs_sequence", "rs_geometric", "mis_floor", "rs_floor")
_DECLARED_BY = {  # each option (less its "policy_" prefix): what declares it where present (any of the alternatives)
    # a loss where PolicyLossRegistry lists it (its names, as the settings selecting them: family.py's prepare)
    **{kind: (configured("PolicyLossRegistry", kind),) for kind in ("gspo", "cispo", "dual_clip")},
    **{f"kl_{kind}": ("compute_approx_kl",) for kind in KL_ESTIMATORS},
    **{name: ("apply_off_policy_correction",) for name in ROLLOUT if name not in _REJECTS},
    **{name: (f"apply_off_policy_correction & {SCALES_ADVANTAGES}",) for name in _REJECTS},
    # the reduction's modes: the pre-scaling's, or the mode reduce_loss takes in the self-reducing form
    **{f"agg_{mode}": (SCALES_ADVANTAGES, "reduce_loss(loss_reduction)") for mode in list(AGGREGATIONS)[1:]},
}
OPTIONS = tuple(Option(f"policy_{name}", when, "policy_loss") for name, when in _DECLARED_BY.items())


def _off_policy(options: PolicyOptions) -> AlgorithmSettings | None:
    """SkyRL's ``off_policy_correction`` for the harness's rollout correction (None: off): TIS is a cap (no floor),
    MIS is TIS times the rejection mask; SkyRL has no geometric-mean weight (so no MIS or TIS at that level)."""
    mode, level = options.rollout_correction, options.rollout_level
    if mode is None:
        return None
    cap, floor = options.rollout_cap, 0.0 if options.rollout_floor is None else options.rollout_floor
    settings = dict.fromkeys(
        ("tis_ratio_type", "sequence_mask_metric", "outlier_token_is_threshold_low", "outlier_token_is_threshold_high")
        + ("token_mask_is_threshold_low", "token_mask_is_threshold_high")
    )
    if mode in ("tis", "mis"):
        settings["tis_ratio_type"] = level
        settings["token_tis_ratio_clip_high" if level == "token" else "sequence_tis_ratio_clip_high"] = cap
    if mode in ("mis", "rs"):
        if level == "token":
            settings.update(token_mask_is_threshold_low=floor, token_mask_is_threshold_high=cap)
        elif level == "sequence":
            settings.update(sequence_mask_metric="product", product_mask_low=floor, product_mask_high=cap)
        else:
            settings.update(sequence_mask_metric="geometric", geo_mask_low=floor, geo_mask_high=cap)
    return AlgorithmSettings(**settings)


def algorithm_settings(call, options: PolicyOptions) -> AlgorithmSettings:
    dual = options.dual_clip_c is not None
    summed_norm = options.aggregation == "seq-mean-token-sum-norm"
    return AlgorithmSettings(
        policy_loss_type="dual_clip" if dual else LOSS_TYPES[options.kind],
        loss_reduction=AGGREGATIONS[options.aggregation],
        # the constant length seq_mean_token_sum_norm divides by (read by every reduction, used by that mode only)
        max_seq_len=int(options.horizon) if summed_norm else max(call.inputs.response_lengths, default=1),
        eps_clip_low=call.eps_clip,
        eps_clip_high=call.clip_high,
        clip_ratio_c=options.dual_clip_c if dual else 3.0,
        # cispo_anchor (0.4.0): "old" is the protocol's CISPO, its ratio against the old log-probs
        cispo=AlgorithmSettings(
            cispo_eps_clip_low=call.eps_clip, cispo_eps_clip_high=call.clip_high, cispo_anchor="old"
        ),
        off_policy_correction=_off_policy(options),
        # the token TIS before apply_off_policy_correction (2026-02): a cap; declared by no symbol, so never asked
        use_tis=options.rollout_correction == "tis" and options.rollout_level == "token",
        tis_imp_ratio_cap=options.rollout_cap,
        use_kl_loss=options.kl_coef != 0,
        kl_loss_coef=float(options.kl_coef),
        kl_estimator_type=KL_ESTIMATORS.get(options.kl_kind),
        use_entropy_loss=bool(call.with_entropy and call.entropy_coef != 0),
        entropy_loss_coef=float(call.entropy_coef),
    )


def _scatter(values, indices, shape, like, cp_group=None) -> torch.Tensor:
    """``[B, R_max]`` zeros with each sample's values (as data) at its indices; with ``cp_group``, every rank's part."""
    out = torch.zeros(shape, dtype=like.dtype, device=like.device)
    for i, (value, index) in enumerate(zip(values, indices)):
        out[i, index] = value.detach().to(out.device, out.dtype)
    if cp_group is not None and dist.is_initialized() and dist.get_world_size(cp_group) > 1:
        dist.all_reduce(out, group=cp_group)
    return out


def aggregate_views(values, indices, masks, options: PolicyOptions, like) -> torch.Tensor:
    """The harness's aggregation of per-sample view values (the adapter's arithmetic, in fp32; this rank's share)."""
    aggregation, total = options.aggregation, torch.zeros((), device=like.device)
    counts = [m.float().sum().clamp(min=1.0).to(like.device) for m in masks]
    for value, index, mask, count in zip(values, indices, masks, counts):
        term = (value.float() * mask.float().to(value.device)[index]).sum()
        total = total + (term / count if aggregation in ("sum-of-sample-mean", "seq-mean-token-mean") else term)
    if aggregation == "token-mean":
        return total / max(float(sum(m.float().sum() for m in masks)), 1.0)
    if aggregation == "seq-mean-token-mean":
        return total / max(len(masks), 1)
    if aggregation == "seq-mean-token-sum-norm":
        return total / (max(len(masks), 1) * options.horizon)
    return total


def policy_loss(up, call, options: PolicyOptions, settings, unpacked, entropy, scales: bool) -> torch.Tensor:
    """The loss from SkyRL's packed output ``unpacked [B, U - 1]`` and this rank's per-sample entropy views
    (computed under the wrapper's gate, or None); ``scales``: the reduction is in the advantages (else the registry
    loss reduces itself)."""
    inputs, (cp, cp_rank) = call.inputs, call.cp
    totals, responses, batch = inputs.total_lengths, inputs.response_lengths, len(inputs.total_lengths)
    shape = (batch, max(responses, default=0))
    starts = [total - response - 1 for total, response in zip(totals, responses)]  # each response's first position
    picked = [unpacked[i, start : start + response] for i, (start, response) in enumerate(zip(starts, responses))]
    action_log_probs = pad_sequence(picked, batch_first=True)
    full_mask = pad_sequence([m.to(unpacked.device, torch.float32) for m in inputs.loss_masks], batch_first=True)
    views = packing.view_positions(inputs, cp, cp_rank)  # this rank's zigzag view, as response indices:
    indices = [[p - start for p in positions] for start, positions in zip(starts, views)]
    mine = _scatter([torch.ones(len(index)) for index in indices], indices, shape, full_mask)
    sequence_weight = options.rollout_correction is not None and options.rollout_level != "token"
    whole = cp > 1 and (options.kind == "gspo" or sequence_weight)  # a sequence-level statistic: every rank's
    like, group = action_log_probs.detach(), call.cp_group if whole else None
    old = _scatter(call.old_log_probs, indices, shape, like, group)
    rollouts = options.rollout_log_probs
    rollout = None if rollouts is None else _scatter(rollouts, indices, shape, like, group)
    advantages = _scatter(call.advantages, indices, shape, full_mask)  # this rank's view; zero elsewhere
    if scales:
        advantages = up.apply_loss_reduction_to_advantages_minibatch(
            advantages, full_mask, settings.loss_reduction, micro_batch_size=batch, max_seq_len=settings.max_seq_len
        )
    loss_mask = full_mask if whole or not scales else full_mask * mine  # reduce_loss divides by the full masks
    loss, _metrics = up.PolicyLossRegistry.get(settings.policy_loss_type)(
        action_log_probs, old, advantages, config=settings, loss_mask=loss_mask, rollout_logprobs=rollout
    )
    if options.aggregation == "sum-of-sample-mean":
        loss = loss * batch
    if settings.use_kl_loss:
        ref = _scatter(options.ref_log_probs, indices, shape, like)
        kl = up.compute_approx_kl(
            action_log_probs, ref, loss_mask=full_mask * mine, kl_estimator_type=settings.kl_estimator_type
        )
        kls = [kl[i, index] for i, index in enumerate(indices)]
        loss = loss + settings.kl_loss_coef * aggregate_views(kls, indices, inputs.loss_masks, options, like)
    if entropy is not None and up.wrapper.term_added(settings):
        loss = loss - settings.entropy_loss_coef * aggregate_views(entropy, indices, inputs.loss_masks, options, like)
    return loss
