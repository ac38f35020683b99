"""ms-swift's Megatron GRPO loss (``MegatronGRPOTrainer.loss_func``) at token level: the stand-in trainer, the options.

``loss_func`` gets the harness's ``[B, R]`` log-probs as ``output_tensor`` and matrices in ``data["grpo_batch"]``,
so the ratio, clip, KL and aggregation are ms-swift's; ``beta``'s KL is k3 clamped as verl's ``low_var_kl``.
"""

from __future__ import annotations

import collections

import torch

from harness.targets.upstream import calls
from harness.targets.upstream.family import configured_options
from harness.targets.upstream.settings import StrictSettings


class Settings(StrictSettings):  # the MegatronGRPOTrainer (self), its args and the GRPOBatch its methods read
    READ_AS = "ms-swift MegatronGRPOTrainer"
    MAPPED_IN = "harness/targets/ms_swift/ (family.py _forward_step, policy.py token_policy_loss)"


OPTIONS = configured_options(
    "RLHFMegatronArgumentsMixin",
    "token_policy_loss",
    {
        **{f"policy_agg_{mode}": ("loss_type",) for mode in ("seq-mean-token-mean", "token-mean")},
        "policy_agg_seq-mean-token-sum-norm": ("loss_type", "max_completion_length"),
        "policy_gspo": ("importance_sampling_level",),
        "policy_dual_clip": ("delta",),
        "policy_gspo_dual_clip": ("importance_sampling_level", "delta"),
        "policy_kl_low_var_kl": ("beta",),
    },
)
NOT_DECLARED = {
    "token_policy_entropy": "the loss has no entropy bonus: the entropy feeds metrics and the top-entropy mask",
    "policy_cispo": "ms-swift's cispo weight is min(r, epsilon_high), an absolute cap with no lower bound, the "
    "protocol's clip(r, 1 - eps, 1 + eps_high)",
    "policy_kl_ratio_weighted": "ms-swift has no ratio-weighted KL",
    "policy_tis_token": "the rollout importance weights come from the trainer's rollout state "
    "(_apply_rollout_importance_sampling on rollout_per_token_logps), not from the protocol's options",
}


def token_policy_loss(up, call: calls.TokenPolicyCall):
    """``loss_func(trainer, log_probs, data)`` on the harness's ``[B, R]`` matrices."""
    options = call.chosen
    rows = call.log_probs.shape[0]
    trainer = Settings(
        micro_batch_size=rows,
        disable_rollout_importance_sampling=True,
        rollout_importance_sampling_mode=None,
        log_rollout_offpolicy_metrics=False,
        beta=float(options.kl_coef),
        kl_in_reward=False,
        importance_sampling_level="sequence_token" if options.kind == "gspo" else "token",
        _has_teacher=False,
        loss_type=call.loss_type("bnpo"),
        epsilon_low=call.eps_clip,
        epsilon_high=call.clip_high,
        compute_entropy=False,
        top_entropy_quantile=1.0,
        log_entropy=False,
        off_policy_sequence_mask_delta=None,
        max_completion_length=options.horizon,
        unwrapped_models=[Settings(training=True)],
        _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)},
        _all_reduce_metric=lambda metric: metric,  # over data-parallel ranks: one here
        _step=1,
        steps_per_generation=1,
        _flush_log_completions=lambda: None,
        args=Settings(delta=call.as_delta("ms-swift"), overlong_filter=False, num_microbatches=1),
    )
    mask = call.loss_mask.to(torch.bool)
    batch = Settings(
        advantages=call.advantages,
        completion_mask=mask,
        truncated_mask=torch.zeros(rows, dtype=torch.bool, device=mask.device),
        ref_per_token_logps=options.ref_log_probs,
        old_per_token_logps=call.old_log_probs,
        rollout_per_token_logps=None,
        num_items_in_batch=mask.sum(),
    )
    loss, _metrics = up.loss_func(trainer, call.log_probs, {"grpo_batch": batch, "per_token_entropy": None})
    return call.per_batch(loss)
