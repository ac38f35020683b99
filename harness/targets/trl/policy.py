"""TRL's GRPO loss (``GRPOTrainer._compute_loss``, ``trl/trainer/grpo_trainer.py``) at token level.

The method under test is loaded alone (``harness.targets.upstream.symbols.load_method``:
its class derives from transformers' ``Trainer``, which is never built) with
TRL's own ``nanmin`` / ``nanmax`` (metrics only) from ``trl/trainer/utils.py``,
and runs with a stand-in ``self`` (``TrainerSettings``, strict: a setting the
method reads that the adapter does not map is an error naming it). The one
call it makes into the model, ``_get_per_token_logps_and_entropies``, returns
the harness's ``[B, R]`` log-probs and entropy, so everything after it, the
loss, is TRL's: ratio, clip, KL, aggregation, entropy bonus.

Mapping (docs/policy-losses.md), declared where the loaded method has it:

* aggregation by ``loss_type``: ``grpo`` is ``seq-mean-token-mean`` (the
  harness's ``sum-of-sample-mean`` is it times ``B``, the adapter's
  arithmetic), ``dapo`` ``token-mean`` (``num_items_in_batch`` = the batch's
  kept tokens, one process, one accumulation step, one step per generation),
  ``dr_grpo`` ``seq-mean-token-sum-norm`` (``max_completion_length`` = the
  constant horizon); ``bnpo`` is token-mean too (not used); no token-sum or
  seq-mean-token-sum;
* KL: ``beta`` with TRL's k3 (unclamped), added per token before the
  aggregation; ``use_bias_correction_kl``: the ratio-weighted KL;
* ``args.delta`` (two-sided clip) as the dual clip, which it equals when
  ``delta >= 1 + epsilon_high`` (docs/policy-losses.md); a smaller ``c`` is
  refused by name.

Not declared, and why: ``token_policy_entropy`` (TRL's bonus is a token mean of the
micro-batch whatever ``loss_type``, the protocol's follows the loss's
aggregation, and a capability cannot be declared for one aggregation only:
Cases with a non-zero entropy coefficient are UNSUPPORTED, those with 0 still
check that the entropy moves nothing); ``cispo`` (TRL's weight is
``min(r, epsilon_high)``, an absolute cap and no lower bound, the protocol's
``clip(r, 1 - eps, 1 + eps_high)``); GSPO (``importance_sampling_level=
"sequence"`` is the sequence form, whose gradient differs from GSPO-token's
under per-token advantages); rollout corrections (TRL computes
``importance_sampling_ratio`` when generating, outside the loss).
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import torch

from harness.targets.protocol import PolicyOptions, Target
from harness.targets.trl import loading
from harness.targets.upstream.settings import OneProcessAccelerator, StrictSettings
from harness.targets.upstream.symbols import load_method, load_symbol

GRPO_TRAINER = Path("trl/trainer/grpo_trainer.py")
LOSS_TYPES = {  # the harness's aggregation -> TRL's loss_type
    "sum-of-sample-mean": "grpo",  # times B
    "seq-mean-token-mean": "grpo",
    "token-mean": "dapo",
    "seq-mean-token-sum-norm": "dr_grpo",
}


class TrainerSettings(StrictSettings):
    """The ``GRPOTrainer`` (``self``) and ``GRPOConfig`` (``self.args``) the method reads, as the adapter fills them."""

    READ_AS = "GRPOTrainer"
    MAPPED_IN = "harness/targets/trl/policy.py (trainer_settings)"


def capabilities(source: str) -> set[str]:
    """The options the loaded ``_compute_loss`` has, read from its source text."""
    caps = {"token_policy_loss"}
    caps |= {f"policy_agg_{mode}" for mode, loss_type in LOSS_TYPES.items() if f'"{loss_type}"' in source}
    caps.discard("policy_agg_sum-of-sample-mean")
    if "self.beta" in source and "ref_per_token_logps" in source:
        caps.add("policy_kl_k3")
        if "use_bias_correction_kl" in source:
            caps.add("policy_kl_ratio_weighted")
    if "self.args.delta" in source:
        caps.add("policy_dual_clip")
    return caps


def trainer_settings(log_probs, entropy, *, eps_clip, eps_clip_high, entropy_coef, options) -> TrainerSettings:
    """The stand-in ``self``: TRL's settings for the harness's options, the model call answered with the inputs."""
    if options.dual_clip_c is not None and options.dual_clip_c < 1 + eps_clip_high:
        raise ValueError(
            f"dual_clip_c={options.dual_clip_c}: TRL's delta equals the dual clip only when delta >= 1 + eps_clip_high"
        )
    entropies = entropy if entropy is not None else torch.zeros_like(log_probs).detach()
    bonus = entropy is not None and entropy_coef != 0
    return TrainerSettings(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (log_probs, entropies, None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=float(options.kl_coef),
        loss_type=LOSS_TYPES[options.aggregation],
        epsilon_low=eps_clip,
        epsilon_high=eps_clip_high,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=TrainerSettings(training=True),
        current_gradient_accumulation_steps=1,
        accelerator=OneProcessAccelerator(),
        max_completion_length=options.horizon,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=bonus,
        use_adaptive_entropy=False,
        entropy_coef=float(entropy_coef),
        _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)},
        args=TrainerSettings(
            delta=options.dual_clip_c,
            use_bias_correction_kl=bool(options.kl_ratio_weighted),
            steps_per_generation=1,
        ),
    )


class TRLPolicyTarget(Target):
    """``GRPOTrainer._compute_loss`` of the TRL tree ``root`` (``LPH_TRL_PATH`` or installed) at token level."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else loading.trl_root()
        self.name = f"trl-{loading.trl_version(self.root)}"
        if not (self.root / GRPO_TRAINER).is_file():
            raise FileNotFoundError(f"{self.root / GRPO_TRAINER}: this TRL has no GRPO trainer")
        utils = self.root / loading.UTILS
        helpers = {name: load_symbol(utils, name) for name in ("nanmin", "nanmax")}
        self.compute_loss = load_method(self.root / GRPO_TRAINER, "GRPOTrainer", "_compute_loss", stand_ins=helpers)
        self.capabilities = frozenset(capabilities((self.root / GRPO_TRAINER).read_text()))

    def token_policy_loss(
        self,
        log_probs,
        *,
        old_log_probs,
        advantages,
        loss_mask,
        eps_clip,
        eps_clip_high,
        entropy,
        entropy_coef,
        options=None,
    ):
        options = options if options is not None else PolicyOptions()
        trainer = trainer_settings(
            log_probs,
            entropy,
            eps_clip=eps_clip,
            eps_clip_high=eps_clip_high,
            entropy_coef=entropy_coef,
            options=options,
        )
        rows, width = log_probs.shape
        inputs = {
            "prompt_ids": torch.zeros(rows, 0, dtype=torch.long, device=log_probs.device),
            "prompt_mask": torch.zeros(rows, 0, dtype=torch.long, device=log_probs.device),
            "completion_ids": torch.zeros(rows, width, dtype=torch.long, device=log_probs.device),
            "completion_mask": loss_mask,
            "advantages": advantages,
            "old_per_token_logps": old_log_probs,
            "num_items_in_batch": loss_mask.sum(),
        }
        if options.kl_coef != 0:
            inputs["ref_per_token_logps"] = options.ref_log_probs
        loss = self.compute_loss(trainer, None, inputs)
        return loss * rows if options.aggregation == "sum-of-sample-mean" else loss
