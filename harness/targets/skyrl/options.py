"""The harness's policy-loss options (``PolicyOptions``) as SkyRL's ``cfg.algorithm`` (docs/policy-losses.md).

What SkyRL has, in ``ppo_utils.py`` / ``off_policy_correction_utils.py``
(0.3.0), each declared where the definition it runs is present (``OPTIONS``):

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

from harness.targets.skyrl import stand_ins
from harness.targets.upstream.family import Option

AGGREGATIONS = {
    "sum-of-sample-mean": "sequence_mean",  # times B (the adapter)
    "seq-mean-token-mean": "sequence_mean",
    "token-mean": "token_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}
KL_ESTIMATORS = {"k1": "k1", "k2": "k2", "abs": "abs", "low_var_kl": "k3"}
LOSS_TYPES = {"ppo": "regular", "gspo": "gspo", "cispo": "cispo"}
ROLLOUT = ("tis_token", "tis_sequence", "mis_token", "mis_sequence", "rs_token", "rs_sequence", "rs_geometric")


def _registered(*names):
    """Declared where SkyRL's ``PolicyLossRegistry`` lists each of ``names`` (data the revision holds)."""

    def holds(up) -> bool:
        listed = getattr(up.PolicyLossRegistry, "list_available", None)
        return listed is not None and set(names) <= set(listed())

    holds.__doc__ = f"PolicyLossRegistry lists {', '.join(names)}"
    return holds


OPTIONS = (
    *(Option(f"policy_{kind}", (_registered(LOSS_TYPES[kind]),), "policy_loss") for kind in ("gspo", "cispo")),
    Option("policy_dual_clip", (_registered("dual_clip"),), "policy_loss"),
    *(Option(f"policy_kl_{kind}", ("compute_approx_kl",), "policy_loss") for kind in KL_ESTIMATORS),
    *(
        Option(f"policy_{name}", ("apply_off_policy_correction",), "policy_loss")
        for name in (*ROLLOUT, "mis_floor", "rs_floor")
    ),
    *(
        Option(f"policy_agg_{mode}", ("apply_loss_reduction_to_advantages_minibatch",), "policy_loss")
        for mode in AGGREGATIONS
        if mode != "sum-of-sample-mean"
    ),
)


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
        # cispo_anchor (0.4.0): "old" is the protocol's CISPO, its ratio against the old log-probs
        cispo=stand_ins.AlgorithmSettings(
            cispo_eps_clip_low=eps_clip, cispo_eps_clip_high=eps_clip_high, cispo_anchor="old"
        ),
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
