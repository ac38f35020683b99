"""ms-swift's GRPO loss (``GRPOTrainer._compute_loss_and_metrics``, ``swift/rlhf_trainers/``) at token level.

The method is loaded alone (``harness.targets.upstream.symbols.load_method``:
its module imports vLLM, TRL, transformers and the trainer stack, and its
class derives from them) and runs with a strict stand-in ``self``
(``TrainerSettings``) and ``GRPOBatch``: its model call,
``_get_per_token_logps_and_entropies``, returns the harness's ``[B, R]``
log-probs, and everything after it, the loss, is ms-swift's. Module-level
names it reads that live in absent packages are stood in: ``gather``,
``gather_object`` (one process: identity), ``nanmin`` / ``nanmax`` (metrics
only), ``logger``; ``compute_sdar_loss`` and ``compute_chord_loss`` refuse to
run (their branches are off: ``sdar_loss_coef = 0``, no CHORD iterator).

Mapping (docs/policy-losses.md), declared where the method has it:

* aggregation by ``loss_type``: ``grpo`` is ``seq-mean-token-mean`` (the
  harness's ``sum-of-sample-mean`` is it times ``B``), ``bnpo``
  ``token-mean``, ``dr_grpo`` ``seq-mean-token-sum-norm``
  (``max_completion_length`` = the horizon);
* ``importance_sampling_level="sequence_token"``: GSPO-token;
* ``args.delta`` as the dual clip, for PPO and GSPO (equal when
  ``delta >= 1 + epsilon_high``; a smaller ``c`` is refused by name);
* ``beta``: a KL loss term whose estimator is k3 with input clamp +-20 and
  output clamp +-10, verl's ``low_var_kl``.

Not declared: ``token_policy_entropy`` (the loss has no entropy bonus; the
entropy feeds metrics and the top-entropy mask), CISPO (``min(r,
epsilon_high)``: an absolute cap without a lower bound), the ratio-weighted
KL (none), and the rollout corrections (their weights come from
``RolloutTrainerMixin`` methods and the trainer's rollout state, not from
this method).
"""

from __future__ import annotations

import collections
import logging
import os
from pathlib import Path

import torch

from harness.targets.protocol import PolicyOptions, Target
from harness.targets.upstream import located
from harness.targets.upstream.settings import OneProcessAccelerator, StrictSettings
from harness.targets.upstream.symbols import load_method

PATH_VARIABLE = "LPH_MS_SWIFT_PATH"
GRPO_TRAINER = Path("swift/rlhf_trainers/grpo_trainer.py")
METHOD = "_compute_loss_and_metrics"
LOSS_TYPES = {  # the harness's aggregation -> ms-swift's loss_type
    "sum-of-sample-mean": "grpo",  # times B
    "seq-mean-token-mean": "grpo",
    "token-mean": "bnpo",
    "seq-mean-token-sum-norm": "dr_grpo",
}


class TrainerSettings(StrictSettings):
    """The ``GRPOTrainer`` (``self``), its ``args`` and the ``GRPOBatch`` the method reads, as the adapter sets them."""

    READ_AS = "ms-swift GRPOTrainer"
    MAPPED_IN = "harness/targets/ms_swift/policy.py (trainer_settings)"


def _refused(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{name} is stood in by harness/targets/ms_swift/policy.py and must not run")

    return refuse


def _nan_reduce(reduce):
    def reduced(tensor):
        kept = tensor[~torch.isnan(tensor)]
        return reduce(kept) if kept.numel() else torch.tensor(float("nan"))

    return reduced


STAND_INS = {
    "gather": lambda tensor: tensor,
    "gather_object": lambda objects: objects,
    "nanmin": _nan_reduce(torch.min),
    "nanmax": _nan_reduce(torch.max),
    "logger": logging.getLogger("lph.ms_swift"),
    "compute_sdar_loss": _refused("compute_sdar_loss"),
    "compute_chord_loss": _refused("compute_chord_loss"),
    "GRPOBatch": object,  # an annotation
}


def _quoted(source: str, word: str) -> bool:
    return f"'{word}'" in source or f'"{word}"' in source


def capabilities(source: str) -> set[str]:
    """The options the method has, read from its source text."""
    caps = {"token_policy_loss"}
    caps |= {f"policy_agg_{mode}" for mode, loss_type in LOSS_TYPES.items() if _quoted(source, loss_type)}
    caps.discard("policy_agg_sum-of-sample-mean")
    if _quoted(source, "sequence_token"):
        caps.add("policy_gspo")
    if "self.args.delta" in source:
        caps.add("policy_dual_clip")
        if "policy_gspo" in caps:
            caps.add("policy_gspo_dual_clip")
    if "self.beta" in source and "ref_per_token_logps" in source:
        caps.add("policy_kl_low_var_kl")
    return caps


def trainer_settings(log_probs, entropy, *, eps_clip, eps_clip_high, options) -> TrainerSettings:
    """The stand-in ``self`` for the harness's options; the model call answers with the harness's inputs."""
    if options.dual_clip_c is not None and options.dual_clip_c < 1 + eps_clip_high:
        raise ValueError(
            f"dual_clip_c={options.dual_clip_c}: ms-swift's delta equals the dual clip only when delta >= 1 + eps_high"
        )
    entropies = entropy if entropy is not None else torch.zeros_like(log_probs).detach()
    return TrainerSettings(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (log_probs, entropies),
        model=TrainerSettings(training=True),
        compute_entropy=False,
        overlong_filter=False,
        beta=float(options.kl_coef),
        kl_in_reward=False,
        rollout_importance_sampling_mode=None,
        log_rollout_offpolicy_metrics=False,
        disable_rollout_importance_sampling=True,
        importance_sampling_level="sequence_token" if options.kind == "gspo" else "token",
        _has_teacher=False,
        off_policy_sequence_mask_delta=None,
        loss_type=LOSS_TYPES[options.aggregation],
        epsilon_low=eps_clip,
        epsilon_high=eps_clip_high,
        max_completion_length=options.horizon,
        accelerator=OneProcessAccelerator(),
        sdar_loss_coef=0.0,
        chord_sft_iterator=None,
        _metrics={"train": collections.defaultdict(list), "eval": collections.defaultdict(list)},
        args=TrainerSettings(delta=options.dual_clip_c, top_entropy_quantile=1.0, log_entropy=False),
    )


class MsSwiftPolicyTarget(Target):
    """``GRPOTrainer._compute_loss_and_metrics`` of the ms-swift tree ``root`` at token level."""

    def __init__(self, root: str | os.PathLike | None = None):
        hint = "`pip install --no-deps ms-swift==X` (`nox -s upstream -- ms_swift==X`)"
        self.root = Path(root) if root is not None else located.package_root("swift", PATH_VARIABLE, GRPO_TRAINER, hint)
        if not (self.root / GRPO_TRAINER).is_file():
            raise FileNotFoundError(f"{self.root / GRPO_TRAINER}: this ms-swift has no GRPO trainer")
        self.name = f"ms-swift-{located.version(self.root, 'ms-swift')}"
        self.compute_loss = load_method(self.root / GRPO_TRAINER, "GRPOTrainer", METHOD, stand_ins=STAND_INS)
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
        trainer = trainer_settings(log_probs, entropy, eps_clip=eps_clip, eps_clip_high=eps_clip_high, options=options)
        mask = loss_mask.to(torch.bool)
        batch = TrainerSettings(
            completion_mask=mask,
            truncated_mask=torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device),
            advantages=advantages,
            old_per_token_logps=old_log_probs,
            ref_per_token_logps=options.ref_log_probs,
            rollout_per_token_logps=None,
            teacher_per_token_logps=None,
        )
        loss, _metrics = self.compute_loss(trainer, None, {}, batch)
        return loss * mask.shape[0] if options.aggregation == "sum-of-sample-mean" else loss
