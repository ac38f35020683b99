"""The harness's policy-loss options (``PolicyOptions``) as SkyRL's ``cfg.algorithm`` (docs/policy-losses.md).

What SkyRL has, read in ``ppo_utils.py`` / ``off_policy_correction_utils.py``
(0.3.0) and declared only where the installed version has it:

* ``policy_loss_type``: ``regular``, ``dual_clip`` (``clip_ratio_c``, PPO only),
  ``gspo`` (GSPO-token, no dual clip), ``cispo`` (``cfg.cispo.cispo_eps_clip_*``);
* ``loss_reduction`` (by pre-scaling the advantages): ``token_mean``,
  ``sequence_mean`` (= seq-mean-token-mean; ``B`` times it is the harness's
  default sum-of-sample-mean), ``seq_mean_token_sum_norm`` (``max_seq_len`` =
  the harness's constant ``horizon``). No token-sum, no seq-mean-token-sum;
* KL: ``compute_approx_kl`` estimators ``k1``, ``k2``, ``abs`` and ``k3``, whose
  ``k3`` clamps the log-ratio to +-20 and the value to 10: the harness's
  ``low_var_kl`` (plain ``k3`` is not declared). SkyRL's trainer always
  reduces the KL term as a per-sample mean averaged over samples, whatever
  ``loss_reduction`` says; the adapter reduces SkyRL's per-token estimator
  with the harness's aggregation, as it does for the entropy term (the
  reduction is the adapter's arithmetic, the estimator SkyRL's);
* rollout corrections (``off_policy_correction``): TIS ``tis_ratio_type``
  ``token`` / ``sequence`` (a cap, no floor); rejection (``rs``) through the
  token mask (``token_mask_is_threshold_low/high``), the ``product`` and the
  ``geometric`` sequence masks; MIS (weight inside, 0 outside) as TIS with
  the same cap times the token / product mask. No geometric-mean weight, so
  no MIS or TIS at the geometric level.
"""

from __future__ import annotations

import inspect

from harness.targets.skyrl import stand_ins

AGGREGATIONS = {
    "sum-of-sample-mean": "sequence_mean",  # times B (the adapter)
    "seq-mean-token-mean": "sequence_mean",
    "token-mean": "token_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}
KL_ESTIMATORS = {"k1": "k1", "k2": "k2", "abs": "abs", "low_var_kl": "k3"}
LOSS_TYPES = {"ppo": "regular", "gspo": "gspo", "cispo": "cispo"}
ROLLOUT = ("tis_token", "tis_sequence", "mis_token", "mis_sequence", "rs_token", "rs_sequence", "rs_geometric")


def capabilities(ppo_utils) -> set[str]:
    """The option capabilities this SkyRL has: its registry's loss types, its KL, correction and reductions."""
    listed = getattr(ppo_utils.PolicyLossRegistry, "list_available", None)
    available = set(listed()) if listed is not None else set()
    caps = {f"policy_{kind}" for kind, name in LOSS_TYPES.items() if kind != "ppo" and name in available}
    if "dual_clip" in available:
        caps.add("policy_dual_clip")
    if hasattr(ppo_utils, "compute_approx_kl"):
        caps |= {f"policy_kl_{kind}" for kind in KL_ESTIMATORS}
    if hasattr(ppo_utils, "apply_off_policy_correction"):
        caps |= {f"policy_{name}" for name in ROLLOUT} | {"policy_mis_floor", "policy_rs_floor"}
    try:
        reductions = inspect.getsource(ppo_utils.apply_loss_reduction_to_advantages_minibatch)
    except (OSError, TypeError):
        reductions = ""
    caps |= {f"policy_agg_{mode}" for mode, name in AGGREGATIONS.items() if f'"{name}"' in reductions}
    return caps - {"policy_agg_sum-of-sample-mean"}


def _off_policy(options) -> stand_ins.AlgorithmSettings | None:
    """SkyRL's ``off_policy_correction`` for the harness's rollout correction (None: off)."""
    mode, level = options.rollout_correction, options.rollout_level
    if mode is None:
        return None
    cap, floor = options.rollout_cap, 0.0 if options.rollout_floor is None else options.rollout_floor
    settings = dict(
        tis_ratio_type=None,
        sequence_mask_metric=None,
        outlier_token_is_threshold_low=None,
        outlier_token_is_threshold_high=None,
        token_mask_is_threshold_low=None,
        token_mask_is_threshold_high=None,
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
    return stand_ins.AlgorithmSettings(**settings)


def algorithm_settings(options, *, eps_clip, eps_clip_high, entropy_coef, with_entropy):
    """SkyRL's ``cfg.algorithm`` for ``options`` (a ``PolicyOptions``, or None for plain PPO)."""
    eps_clip_high = eps_clip if eps_clip_high is None else eps_clip_high
    kind = "ppo" if options is None else options.kind
    dual = options is not None and options.dual_clip_c is not None
    aggregation = "sum-of-sample-mean" if options is None else options.aggregation
    return stand_ins.AlgorithmSettings(
        policy_loss_type="dual_clip" if dual else LOSS_TYPES[kind],
        loss_reduction=AGGREGATIONS[aggregation],
        eps_clip_low=eps_clip,
        eps_clip_high=eps_clip_high,
        clip_ratio_c=options.dual_clip_c if dual else 3.0,
        cispo=stand_ins.AlgorithmSettings(cispo_eps_clip_low=eps_clip, cispo_eps_clip_high=eps_clip_high),
        off_policy_correction=None if options is None else _off_policy(options),
        use_kl_loss=options is not None and options.kl_coef != 0,
        kl_loss_coef=0.0 if options is None else float(options.kl_coef),
        kl_estimator_type=KL_ESTIMATORS.get("low_var_kl" if options is None else options.kl_kind),
        use_entropy_loss=bool(with_entropy and entropy_coef != 0),
        entropy_loss_coef=float(entropy_coef),
    )


def needs_whole_samples(options) -> bool:
    """A sequence-level statistic (GSPO's ratio, a sequence or geometric rollout weight) needs every CP rank's part."""
    if options is None:
        return False
    return options.kind == "gspo" or (options.rollout_correction is not None and options.rollout_level != "token")
