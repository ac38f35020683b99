"""The harness's policy-loss options (``PolicyOptions``) as slime's ``args`` and batch (docs/policy-losses.md).

What slime's ``policy_loss_function`` reads (checked in its source, so a
revision without a setting does not declare the option):

* ``--eps-clip-c``: dual clip (PPO; ``compute_policy_loss``);
* ``--advantage-estimator cispo``: ``compute_cispo_loss`` with slime's own
  clip range (``1 - eps_clip``, ``1 + eps_clip_high``);
* ``--use-kl-loss``, ``--kl-loss-type`` (``k1``, ``k2``, ``k3``,
  ``low_var_kl``), ``--kl-loss-coef``, ``--use-unbiased-kl`` (the KL times
  the ratio ``exp(logp - old)``, with its gradient), reduced by the same
  reducer as the policy term;
* ``--use-tis`` with ``--tis-clip`` / ``--tis-clip-low``
  (``vanilla_tis_function``): token-level TIS, the floor 0 when the harness
  has none; the batch carries ``rollout_log_probs`` and the per-sample mask
  sums ``rollout_mask_sums`` that slime rebuilds its reducer from;
* ``--calculate-per-token-loss``: the reducer sums tokens (``token-sum``
  per call; slime's ``loss_function`` then divides by the global token
  count, trainer bookkeeping the harness leaves out).

Not declared: GSPO (slime's is the sequence form, the harness's the
GSPO-token form: same value, different gradient unless the advantages are
constant over a sample), MIS / rejection (``icepop_function`` needs a
``--custom-tis-function-path`` loaded by import path), sequence-level
weights, the other aggregation modes.
"""

from __future__ import annotations

import inspect

KL_KINDS = ("k1", "k2", "k3", "low_var_kl")


def _source(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def capabilities(api) -> set[str]:
    """The option capabilities of this revision, read from ``policy_loss_function`` and its helpers."""
    loss_source = _source(api.policy_fn)
    ppo = api.modules.get("slime.utils.ppo_utils")
    loss = api.modules.get("slime.backends.megatron_utils.loss")
    caps = set()
    if "eps_clip_c" in _source(getattr(ppo, "compute_policy_loss", None)) and "eps_clip_c" in loss_source:
        caps.add("policy_dual_clip")
    if "cispo" in loss_source and hasattr(ppo, "compute_cispo_loss"):
        caps.add("policy_cispo")
    kl_source = _source(getattr(ppo, "compute_approx_kl", None))
    if "use_kl_loss" in loss_source:
        caps |= {f"policy_kl_{kind}" for kind in KL_KINDS if f'"{kind}"' in kl_source}
        if "use_unbiased_kl" in loss_source and "importance_ratio" in kl_source:
            caps.add("policy_kl_ratio_weighted")
    tis_source = _source(getattr(loss, "vanilla_tis_function", None))
    if "use_tis" in loss_source and "tis_clip_low" in tis_source and "rollout_mask_sums" in loss_source:
        caps |= {"policy_tis_token", "policy_tis_floor"}
    per_token = "calculate_per_token_loss" in inspect.signature(api.sum_of_sample_mean_fn).parameters
    if per_token and "calculate_per_token_loss" in loss_source:
        caps.add("policy_agg_token-sum")
    return caps


def settings(options) -> dict:
    """slime ``args`` for ``options`` (empty for None: the adapter's plain PPO defaults)."""
    if options is None:
        return {}
    out = {
        "eps_clip_c": options.dual_clip_c,
        "advantage_estimator": "cispo" if options.kind == "cispo" else "grpo",
        "use_kl_loss": options.kl_coef != 0,
        "kl_loss_coef": float(options.kl_coef),
        "kl_loss_type": options.kl_kind,
        "use_unbiased_kl": bool(options.kl_ratio_weighted),
        "calculate_per_token_loss": options.aggregation == "token-sum",
    }
    if options.rollout_correction is not None:
        floor = 0.0 if options.rollout_floor is None else options.rollout_floor
        out.update(use_tis=True, tis_clip=options.rollout_cap, tis_clip_low=floor)
    return out


def batch_entries(options, masks) -> dict:
    """The batch keys ``options`` need: reference and rollout log-probs, the per-sample mask sums."""
    if options is None:
        return {}
    out = {}
    if options.kl_coef != 0:
        out["ref_log_probs"] = list(options.ref_log_probs)
    if options.rollout_correction is not None:
        out["rollout_log_probs"] = list(options.rollout_log_probs)
        out["rollout_mask_sums"] = [mask.sum() for mask in masks]
    return out
