"""NeMo-RL's policy loss (``ClippedPGLossFn``, ``nemo_rl/algorithms/loss/loss_functions.py``) at token level.

It takes next-token log-probs (``input_type = LOGPROB``), called as NeMo's loss wrapper calls it. Its module imports
pydantic and the DTensor helpers at the top, so the class and what it reads are loaded alone; the config is a
strict settings object naming any field a revision reads and the entry does not map. The option mapping is
docs/policy-losses.md's conventions table.
"""

from __future__ import annotations

import torch

from harness.targets.protocol import PolicyOptions
from harness.targets.upstream.family import configured_options
from harness.targets.upstream.settings import StrictSettings

LOSS_FUNCTIONS = "nemo_rl/algorithms/loss/loss_functions.py"
INTERFACES = "nemo_rl/algorithms/loss/interfaces.py"
UTILS = "nemo_rl/algorithms/utils.py"
INTERFACE_NAMES = ("LossFunction", "LossType", "LossInputType", "MetricNormalizer")
TOKEN_LEVEL = {"token-mean": True, "seq-mean-token-mean": False, "sum-of-sample-mean": False}
ROLLOUT_TYPES = {"tis": "tis", "mis": "icepop"}  # the protocol's mode -> truncated_importance_sampling_type


class LossConfig(StrictSettings):
    READ_AS = "ClippedPGLossConfig"
    MAPPED_IN = "harness/targets/nemo_rl/policy.py (loss_config)"

    # Before the pydantic config (#2325, 2026-05), ClippedPGLossConfig was a TypedDict: cfg["name"], cfg.get("name", d).
    def __getitem__(self, name):
        return getattr(self, name)

    def get(self, name, default=None):
        return vars(self).get(name, default)


class _ConfigBase:
    """``pydantic.BaseModel`` while ``ClippedPGLossConfig`` is loaded to read its fields (not installed here)."""

    def __init_subclass__(cls, **options):
        super().__init_subclass__()


_KL = ("reference_policy_kl_penalty", "reference_policy_kl_type")
_TRUNCATION = ("truncated_importance_sampling_type", "truncated_importance_sampling_ratio_min")
OPTIONS = configured_options(  # each declared by the ClippedPGLossConfig fields that select it
    "ClippedPGLossConfig",
    "token_policy_loss",
    {
        **{f"policy_agg_{mode}": ("token_level_loss",) for mode in ("token-mean", "seq-mean-token-mean")},
        "policy_dual_clip": ("ratio_clip_c",),
        "policy_cispo": ("use_cispo",),
        **{f"policy_kl_{kind}": _KL for kind in ("k1", "k2", "k3")},
        "policy_kl_ratio_weighted": (*_KL, "use_on_policy_kl_approximation"),
        **{f"policy_{mode}_{what}": _TRUNCATION for mode in ROLLOUT_TYPES for what in ("token", "floor")},
    },
)
_MODES = ("tis", "mis", "rs")  # the protocol's rollout corrections
NOT_DECLARED = {
    "policy_loss": "ClippedPGLossFn takes next-token log-probs (input_type LOGPROB) and has no entropy term "
    "(approx_entropy is a metric): it is checked at token level (token_policy_loss)",
    "token_policy_entropy": "ClippedPGLossFn has no entropy bonus (approx_entropy is a metric)",
    "policy_gspo": "sequence_level_importance_ratios is GSPO's sequence form, not GSPO-token, and forces the "
    "sequence-level loss",
    "policy_gspo_dual_clip": "as policy_gspo",
    **{f"policy_{mode}_sequence": "NeMo's sequence-level IS weight exists only with its GSPO" for mode in _MODES},
    **{
        f"policy_{mode}_geometric": "seq-mask-tis zeroes a sequence by its geometric-mean ratio but keeps the raw "
        "token weights inside it"
        for mode in _MODES
    },
    **dict.fromkeys(("policy_rs_token", "policy_rs_floor"), "no weight-free mask (icepop keeps the weight)"),
    "policy_kl_low_var_kl": "NeMo clamps the weighted KL and detaches the weight where the input clamp bites: "
    "neither form of the protocol; its clamps are set off (None) in these checks",
    "policy_kl_abs": "no such KL type (k1, k2, k3 only)",
    **{
        f"policy_agg_{mode}": "NeMo always divides by global_valid_toks or global_valid_seqs"
        for mode in ("token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm")
    },
}


def load(up) -> None:
    """``up.loss_class`` and ``up.config_fields`` (the config's fields), loaded alone; None and empty where the
    revision has no loss package (before #1920, 2026-03, ClippedPGLossFn took logits)."""
    up.loss_class, up.config_fields = None, frozenset()
    if not (up.root / LOSS_FUNCTIONS).is_file():
        return
    absent = {"BatchedDataDict": dict}  # read in annotations only
    # MetricNormalizer is newer (2026-07) than the loss package
    found = {name: up.loader.symbol_if_present(INTERFACES, name, stand_ins=absent) for name in INTERFACE_NAMES}
    interfaces = {name: value for name, value in found.items() if value is not None}
    helpers = {name: up.loader.symbol(UTILS, name) for name in ("calculate_kl", "masked_mean")}
    config = up.loader.symbol(LOSS_FUNCTIONS, "ClippedPGLossConfig", stand_ins={"BaseModel": _ConfigBase})
    up.config_fields = frozenset(name for klass in config.__mro__ for name in getattr(klass, "__annotations__", {}))
    stand_ins = {**interfaces, **helpers, **absent, "ClippedPGLossConfig": LossConfig}
    up.loss_class = up.loader.symbol(LOSS_FUNCTIONS, "ClippedPGLossFn", stand_ins=stand_ins)


def combination_needs(up, options: PolicyOptions) -> set[str]:
    """Names (never declared) for the option combinations NeMo-RL has no form for; empty when it runs them."""
    needs = set()
    if options.kl_coef != 0 and not options.kl_ratio_weighted:
        # Since #2506 (2026-06) the KL weight is exp(logp - sg logp) unless the on-policy approximation is on: value 1,
        # with the score-function gradient, so the protocol's plain KL (gradient grad k) has no form there. The
        # revisions before (weight 1) are not told apart: that would read the loss's source.
        needs.add("policy_kl_without_score_term")
    if options.kl_coef != 0 and options.kl_ratio_weighted and options.rollout_correction is not None:
        needs.add("policy_kl_ratio_weighted_with_rollout_correction")  # the weight is then exp(logp - rollout)
    if options.kind == "cispo" and options.aggregation != "token-mean":
        needs.add(f"policy_cispo_agg_{options.aggregation}")  # NeMo asserts token_level_loss with use_cispo
    return needs


def loss_config(call) -> LossConfig:
    """NeMo's loss configuration for the call's options (every field ``__init__`` reads, set explicitly)."""
    options = call.chosen
    correction, floor = options.rollout_correction, options.rollout_floor
    if correction == "mis" and floor is None:
        floor = 0.0  # icepop needs a lower bound; weights are positive, so 0 keeps all of them
    return LossConfig(
        disable_ppo_ratio=False,
        token_level_loss=TOKEN_LEVEL[options.aggregation],
        sequence_level_importance_ratios=False,
        ratio_clip_min=call.eps_clip,
        ratio_clip_max=call.clip_high,
        ratio_clip_c=options.dual_clip_c,
        reference_policy_kl_penalty=float(options.kl_coef),
        reference_policy_kl_type=options.kl_kind,
        kl_input_clamp_value=None,
        kl_output_clamp_value=None,
        use_kl_in_reward=False,
        use_importance_sampling_correction=correction is not None,
        truncated_importance_sampling_type=None if correction is None else ROLLOUT_TYPES[correction],
        truncated_importance_sampling_ratio=None if correction is None else float(options.rollout_cap),
        truncated_importance_sampling_ratio_min=floor,
        use_on_policy_kl_approximation=bool(options.kl_ratio_weighted),
        force_on_policy_ratio=False,
        use_cispo=options.kind == "cispo",
        positive_example_nll_weight=0.0,
    )


def token_policy_loss(up, call):
    """``ClippedPGLossFn(config)(log_probs, data, global_valid_seqs=, global_valid_toks=)``, as NeMo's wrapper does."""
    options = call.chosen
    unmet = combination_needs(up, options)
    if unmet:
        raise ValueError(f"NeMo-RL's ClippedPGLossFn has no form for {sorted(unmet)} (combination_needs)")
    loss_fn = up.loss_class(loss_config(call))
    log_probs, loss_mask = call.log_probs, call.loss_mask
    rows = log_probs.shape[0]
    generation = options.rollout_log_probs if options.rollout_correction is not None else call.old_log_probs
    per_token = {
        "token_mask": loss_mask,
        "advantages": call.advantages,
        "prev_logprobs": call.old_log_probs,
        "generation_logprobs": generation,
    }
    if options.kl_coef != 0:
        per_token["reference_policy_logprobs"] = options.ref_log_probs
    # NeMo's data dict holds [B, R + 1] (column 0, no next-token log-prob, is dropped by it)
    data = {key: torch.nn.functional.pad(matrix, (1, 0)) for key, matrix in per_token.items()}
    data["sample_mask"] = loss_mask.new_ones(rows)
    valid_seqs = torch.tensor(float(rows), device=log_probs.device)
    loss, _metrics = loss_fn(log_probs, data, global_valid_seqs=valid_seqs, global_valid_toks=loss_mask.sum())
    return call.per_batch(loss)
