"""TRL's GRPO loss (``GRPOTrainer._compute_loss``) at token level: the stand-in trainer and the options' settings.

Its one call into the model answers with the harness's ``[B, R]`` log-probs and entropy, so everything after it
(ratio, clip, KL, aggregation, entropy bonus) is TRL's. A ``loss_type`` value a revision does not know FAILS.
"""

from __future__ import annotations

import ast
import collections

import torch

from harness.targets.upstream import calls
from harness.targets.upstream.family import configured_options
from harness.targets.upstream.settings import OneProcessAccelerator, StrictSettings
from harness.targets.upstream.symbols import source_tree


class TrainerSettings(StrictSettings):  # the GRPOTrainer (self) and GRPOConfig (self.args) _compute_loss reads
    READ_AS, MAPPED_IN = "GRPOTrainer", "harness/targets/trl/policy.py (token_policy_loss)"


OPTIONS = configured_options(
    "GRPOConfig",
    "token_policy_loss",
    {
        **{f"policy_agg_{mode}": ("loss_type",) for mode in ("seq-mean-token-mean", "token-mean")},
        "policy_agg_seq-mean-token-sum-norm": ("loss_type", "max_completion_length"),
        "policy_kl_k3": ("beta",),
        "policy_kl_ratio_weighted": ("beta", "use_bias_correction_kl"),
        "policy_dual_clip": ("delta",),
    },
)

NOT_DECLARED = {
    "token_policy_entropy": "TRL's bonus is a token mean of the micro-batch whatever loss_type, the protocol's "
    "follows the loss's aggregation (Cases with a coefficient of 0 still check that the entropy moves nothing)",
    "policy_cispo": "TRL's weight is min(r, epsilon_high), an absolute cap with no lower bound, the protocol's "
    "clip(r, 1 - eps, 1 + eps_high)",
    "policy_gspo": "importance_sampling_level='sequence' is the sequence form, whose gradient differs from "
    "GSPO-token's under per-token advantages",
    "policy_tis_token": "TRL computes importance_sampling_ratio when generating, outside the loss",
}


REFERENCE = object()  # the trainer's reference model, as the loss of TRL 0.18 calls it


def unpacked(method, callee: str) -> int | None:
    """How many values ``method`` unpacks from its call of ``self.<callee>`` (None: it unpacks none): the form of
    the model call's answer, two values (log-probs, entropies) to TRL 1.6, three (and ``aux_loss``) from 1.7."""
    for node in ast.walk(source_tree(method)):
        value = getattr(node, "value", None)
        if isinstance(node, ast.Assign) and isinstance(value, ast.Call) and getattr(value.func, "attr", "") == callee:
            return len(node.targets[0].elts) if isinstance(node.targets[0], ast.Tuple) else None
    return None


def token_policy_loss(up, call: calls.TokenPolicyCall):
    """``_compute_loss(trainer, model, inputs)`` on the harness's ``[B, R]`` matrices."""
    options = call.chosen
    entropies = call.entropy if call.entropy is not None else torch.zeros_like(call.log_probs).detach()
    trainer = TrainerSettings(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (call.log_probs, entropies, None)[: up.unpacks],
        # its form to 0.19, the log-probs alone; to 0.18 the loss also asks the reference model for its own
        _get_per_token_logps=lambda model, *args: options.ref_log_probs if model is REFERENCE else call.log_probs,
        ref_model=REFERENCE,
        tools=None,  # no tool calls: the completion mask alone (read up to 0.27)
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=float(options.kl_coef),
        loss_type=call.loss_type("dapo"),
        epsilon_low=call.eps_clip,
        epsilon_high=call.clip_high,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=TrainerSettings(training=True),
        current_gradient_accumulation_steps=1,
        accelerator=OneProcessAccelerator(),
        max_completion_length=options.horizon,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=call.entropy is not None and call.entropy_coef != 0,
        use_adaptive_entropy=False,
        entropy_coef=float(call.entropy_coef),
        _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)},
        args=TrainerSettings(
            delta=call.as_delta("TRL"), use_bias_correction_kl=bool(options.kl_ratio_weighted), steps_per_generation=1
        ),
    )
    no_prompt = call.loss_mask.new_zeros(call.loss_mask.shape[0], 0, dtype=torch.long)  # read by the model call only
    inputs = {
        "prompt_ids": no_prompt,
        "prompt_mask": no_prompt,
        "completion_ids": torch.zeros_like(call.loss_mask, dtype=torch.long),
        "completion_mask": call.loss_mask,
        "advantages": call.advantages,
        "old_per_token_logps": call.old_log_probs,
        "num_items_in_batch": call.loss_mask.sum(),
    }
    if options.kl_coef != 0:
        inputs["ref_per_token_logps"] = options.ref_log_probs
    return call.per_batch(up.compute_loss(trainer, None, inputs))
