"""The harness's policy-loss options (``PolicyOptions``) as slime's ``args`` and batch (docs/policy-losses.md).

An option is declared where the definition slime's loss calls for it is present, whether or not the loss passes
the setting through: present but not wired reads FAIL, never UNSUPPORTED (slime passed ``eps_clip_c`` on only
from #2247). TIS takes the floor 0 when the harness gives none; with ``--calculate-per-token-loss`` slime's
``loss_function`` then divides by the global token count, trainer bookkeeping the harness leaves out.
"""

from __future__ import annotations

import torch

from harness.targets.upstream.family import Option, accepts

# Each KL estimator the harness names, and slime's names for it, the current first: k1 was "kl" (with the CLI's
# --kl-loss-type choice) until #483 (2025-10-20) renamed it. A revision's name is the one its compute_approx_kl takes.
KL_NAMES = {"k1": ("k1", "kl"), "k2": ("k2",), "k3": ("k3",), "low_var_kl": ("low_var_kl",)}
_PROBE = (torch.zeros(2), torch.zeros(2))


def kl_name(up, kind: str) -> str | None:
    """slime's name for the KL estimator ``kind`` in this revision (None: its compute_approx_kl takes none of them)."""
    return next((name for name in KL_NAMES[kind] if accepts("compute_approx_kl", *_PROBE, name)(up)), None)


def _kl_taken(kind: str):
    def holds(up) -> bool:
        return kl_name(up, kind) is not None

    holds.__doc__ = f"compute_approx_kl takes {' or '.join(map(repr, KL_NAMES[kind]))}"
    return holds


OPTIONS = (
    Option("policy_dual_clip", ("compute_policy_loss(eps_clip_c)",), "policy_loss"),
    Option("policy_cispo", ("compute_cispo_loss",), "policy_loss"),
    *(Option(f"policy_kl_{kind}", (_kl_taken(kind),), "policy_loss") for kind in KL_NAMES),
    Option("policy_kl_ratio_weighted", ("compute_approx_kl(importance_ratio)",), "policy_loss"),
    *(Option(f"policy_tis_{form}", ("vanilla_tis_function",), "policy_loss") for form in ("token", "floor")),
    Option("policy_agg_token-sum", ("get_sum_of_sample_mean(calculate_per_token_loss)",), "policy_loss"),
)
NOT_DECLARED = {
    "policy_gspo": "slime's GSPO is the sequence form, the harness's the GSPO-token form: same value, different "
    "gradient unless the advantages are constant over a sample",
    "policy_mis_token": "icepop_function needs --custom-tis-function-path, loaded by import path",
    "policy_rs_token": "as policy_mis_token: rejection needs a --custom-tis-function-path",
    "policy_tis_sequence": "slime's vanilla TIS is token-level",
    **{
        f"policy_agg_{mode}": "get_sum_of_sample_mean is the sum of sample means, or with --calculate-per-token-loss "
        "the token sum"
        for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
    },
}


def settings(up, call, masks) -> tuple[dict, dict]:
    """slime ``args`` for the call's clip range, entropy coefficient and options, and the batch keys the options
    need (reference and rollout log-probs, the per-sample mask sums); options None: plain PPO."""
    args = dict(eps_clip=call.eps_clip, eps_clip_high=call.clip_high, observe_training_entropy=bool(call.with_entropy))
    args["entropy_coef"] = float(call.entropy_coef) if call.with_entropy else 0.0
    options, batch = call.options, {}
    if options is None:
        return args, batch
    args.update(
        eps_clip_c=options.dual_clip_c,
        advantage_estimator="cispo" if options.kind == "cispo" else "grpo",
        use_kl_loss=options.kl_coef != 0,
        kl_loss_coef=float(options.kl_coef),
        # the harness's name where the revision takes none of slime's: unread, as the boundary refused any KL
        # kind the revision lacks (FamilyTarget), so this is the default kind at kl_coef 0
        kl_loss_type=kl_name(up, options.kl_kind) or options.kl_kind,
        use_unbiased_kl=bool(options.kl_ratio_weighted),
        calculate_per_token_loss=options.aggregation == "token-sum",
    )
    if options.kl_coef != 0:
        batch["ref_log_probs"] = list(options.ref_log_probs)
    if options.rollout_correction is not None:
        floor = 0.0 if options.rollout_floor is None else options.rollout_floor
        args.update(use_tis=True, tis_clip=options.rollout_cap, tis_clip_low=floor)
        batch.update(rollout_log_probs=list(options.rollout_log_probs), rollout_mask_sums=[m.sum() for m in masks])
    return args, batch
