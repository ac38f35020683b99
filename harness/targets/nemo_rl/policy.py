"""NeMo-RL's policy loss (``ClippedPGLossFn``, ``nemo_rl/algorithms/loss/loss_functions.py``) at token level.

``ClippedPGLossFn`` has ``input_type = LOGPROB``: NeMo's loss wrapper
(``nemo_rl/algorithms/loss/wrapper.py``) turns the model's logits into
next-token log-probs and calls it with them, the batch's data dict and the
global counts ``global_valid_seqs`` / ``global_valid_toks``. That call is
what the adapter makes, with the harness's ``[B, R]`` matrices as the
log-probs. The class is loaded alone (``harness.targets.upstream.symbols``;
its module imports pydantic, ``BatchedDataDict``, the DTensor and
cross-tokenizer helpers at the top): ``LossFunction``, ``LossType``,
``LossInputType`` and ``MetricNormalizer`` come from the checkout's
``loss/interfaces.py``, ``calculate_kl`` and ``masked_mean`` from
``nemo_rl/algorithms/utils.py``, each loaded alone too; ``BatchedDataDict``
(annotations only) is ``dict``, and the pydantic ``ClippedPGLossConfig`` is
a strict settings object (``LossConfig``) that names any field the
revision reads and the adapter does not map.

Conventions (docs/policy-losses.md, "NeMo-RL"):

* the data dict's per-token entries are ``[B, R + 1]``: NeMo drops column 0
  (the first token has no next-token log-prob), so the adapter prepends a
  zero column; ``sample_mask`` is all ones (every harness sample counts);
* ``global_valid_toks`` is the batch's kept-token count, ``global_valid_seqs``
  its sample count, as NeMo's wrapper all-reduces them over data parallel;
* aggregation: ``token_level_loss=True`` is ``token-mean``, ``False``
  ``seq-mean-token-mean``; the harness's ``sum-of-sample-mean`` is the latter
  times ``B`` (the adapter's arithmetic);
* ``ratio_clip_min`` / ``ratio_clip_max`` are the clip offsets, ``ratio_clip_c``
  the dual clip; ``use_cispo`` CISPO (NeMo asserts ``token_level_loss``);
* KL: NeMo weights every KL term by ``exp(logp - sg(logp))`` (value 1, the
  score term in the gradient) or, with ``use_on_policy_kl_approximation``,
  by ``exp(logp - generation_logprobs)``. The second, with the generation
  log-probs being the old ones (no rollout correction: the sampler was the
  old policy), is the protocol's ratio-weighted KL; ``kl_input_clamp_value``
  and ``kl_output_clamp_value`` are set to None (the protocol's ``k1``,
  ``k2``, ``k3`` are unclamped);
* rollout corrections: ``use_importance_sampling_correction`` with
  ``truncated_importance_sampling_type="tis"`` (TIS, floor
  ``truncated_importance_sampling_ratio_min``) and ``"icepop"`` (MIS; no floor
  is a floor of 0), at token level, ``generation_logprobs`` the rollout's.

Combinations NeMo has no form for are refused per Case (``combination_needs``:
UNSUPPORTED, never run as something else): a KL without the score term,
a ratio-weighted KL together with a rollout correction (NeMo's weight is then
``exp(logp - rollout)``), CISPO under an aggregation other than token-mean.
Not declared at all, and why: in docs/policy-losses.md and docs/targets.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from harness.targets.protocol import PolicyOptions, Target
from harness.targets.upstream.settings import StrictSettings
from harness.targets.upstream.symbols import load_symbol

LOSS_FUNCTIONS = Path("nemo_rl/algorithms/loss/loss_functions.py")
INTERFACES = Path("nemo_rl/algorithms/loss/interfaces.py")
UTILS = Path("nemo_rl/algorithms/utils.py")
INTERFACE_NAMES = ("LossFunction", "LossType", "LossInputType", "MetricNormalizer")
KL_KINDS = ("k1", "k2", "k3")
TOKEN_LEVEL = {"token-mean": True, "seq-mean-token-mean": False, "sum-of-sample-mean": False}
ROLLOUT_TYPES = {"tis": "tis", "mis": "icepop"}  # the protocol's mode -> truncated_importance_sampling_type
# The KL weight's forms, which changed over the revisions: HEAD always multiplies by exp(x - x.detach()) (the score
# term); before, the default weight was 1 and the on-policy approximation's exp(logp - generation) was detached.
SCORE_TERM_ALWAYS = re.compile(r"exp\(\s*(\w+)\s*-\s*\1\.detach\(\)\s*\)")
DETACHED_ON_POLICY_WEIGHT = re.compile(r"-\s*generation_logprobs\s*\)\s*\.detach\(\)")


class LossConfig(StrictSettings):
    """The ``ClippedPGLossConfig`` fields ``ClippedPGLossFn.__init__`` reads, as the adapter sets them."""

    READ_AS = "ClippedPGLossConfig"
    MAPPED_IN = "harness/targets/nemo_rl/policy.py (loss_config)"

    # Before the pydantic config (#2325, 2026-05), ClippedPGLossConfig was a TypedDict: cfg["name"], cfg.get("name", d).
    def __getitem__(self, name):
        return getattr(self, name)

    def get(self, name, default=None):
        return vars(self).get(name, default)


def _quoted(source: str, word: str) -> bool:
    return f'"{word}"' in source or f"'{word}'" in source


def kl_forms(source: str) -> frozenset[str]:
    """Which of the protocol's KL forms the revision's loss has: ``"plain"`` (gradient ``grad k``: its default
    weight is 1) and ``"ratio_weighted"`` (the on-policy approximation's weight, with its gradient)."""
    if "use_on_policy_kl_approximation" not in source or "kl_input_clamp_value" not in source:
        return frozenset()
    forms = set()
    if not SCORE_TERM_ALWAYS.search(source):
        forms.add("plain")
    if not DETACHED_ON_POLICY_WEIGHT.search(source):
        forms.add("ratio_weighted")
    return frozenset(forms)


def capabilities(source: str) -> set[str]:
    """The options the revision's ``ClippedPGLossFn`` has, read from the module's text."""
    caps = {"token_policy_loss"}
    if "token_level_loss" in source:
        caps |= {"policy_agg_token-mean", "policy_agg_seq-mean-token-mean"}
    if "ratio_clip_c" in source:
        caps.add("policy_dual_clip")
    if "use_cispo" in source:
        caps.add("policy_cispo")
    forms = kl_forms(source)
    if forms:
        caps |= {f"policy_kl_{kind}" for kind in KL_KINDS}
    if "ratio_weighted" in forms:
        caps.add("policy_kl_ratio_weighted")
    if "truncated_importance_sampling_ratio_min" in source:
        for mode, name in ROLLOUT_TYPES.items():
            if _quoted(source, name):
                caps |= {f"policy_{mode}_token", f"policy_{mode}_floor"}
    return caps


def combination_needs(options: PolicyOptions, forms: frozenset[str]) -> set[str]:
    """Names (never declared) for the option combinations NeMo-RL has no form of; empty when it runs them.

    ``forms``: the revision's ``kl_forms``."""
    needs = set()
    if options.kl_coef != 0 and not options.kl_ratio_weighted and "plain" not in forms:
        needs.add("policy_kl_without_score_term")  # the KL weight always carries exp(logp - sg logp)'s gradient
    if options.kl_coef != 0 and options.kl_ratio_weighted and options.rollout_correction is not None:
        # the weight is then exp(logp - rollout)
        needs.add("policy_kl_ratio_weighted_with_rollout_correction")
    if options.kind == "cispo" and options.aggregation != "token-mean":
        needs.add(f"policy_cispo_agg_{options.aggregation}")  # NeMo asserts token_level_loss with use_cispo
    return needs


def loss_config(*, eps_clip, eps_clip_high, options: PolicyOptions, forms: frozenset[str]) -> LossConfig:
    """NeMo's loss configuration for the harness's options (every field ``__init__`` reads, set explicitly)."""
    unmet = combination_needs(options, forms)
    if unmet:
        raise ValueError(f"NeMo-RL's ClippedPGLossFn has no form for {sorted(unmet)} (combination_needs)")
    correction = options.rollout_correction
    floor = options.rollout_floor
    if correction == "mis" and floor is None:
        floor = 0.0  # icepop needs a lower bound; weights are positive, so 0 keeps all of them
    return LossConfig(
        disable_ppo_ratio=False,
        token_level_loss=TOKEN_LEVEL[options.aggregation],
        sequence_level_importance_ratios=False,
        ratio_clip_min=eps_clip,
        ratio_clip_max=eps_clip_high,
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


def _with_first_column(matrix: torch.Tensor) -> torch.Tensor:
    """``[B, R]`` as NeMo's data dict holds it, ``[B, R + 1]``: column 0 (no next-token log-prob) is dropped by it."""
    return torch.cat([matrix.new_zeros(matrix.shape[0], 1), matrix], dim=1)


def load_loss_class(root: Path):
    """``ClippedPGLossFn`` from the checkout ``root``, with its interfaces and helpers loaded alone."""
    absent = {"BatchedDataDict": dict}  # read in annotations only
    text = (root / INTERFACES).read_text()  # MetricNormalizer is newer (2026-07) than the loss package (2026-03)
    defined = [name for name in INTERFACE_NAMES if f"class {name}(" in text]
    interfaces = {name: load_symbol(root / INTERFACES, name, stand_ins=absent) for name in defined}
    helpers = {name: load_symbol(root / UTILS, name) for name in ("calculate_kl", "masked_mean")}
    stand_ins = {**interfaces, **helpers, **absent, "ClippedPGLossConfig": LossConfig}
    return load_symbol(root / LOSS_FUNCTIONS, "ClippedPGLossFn", stand_ins=stand_ins)


class NemoRLPolicyTarget(Target):
    """``ClippedPGLossFn`` of the NeMo-RL checkout ``root`` at token level (see the module docstring)."""

    def __init__(self, root: str | os.PathLike, name: str = "nemo_rl"):
        self.root, self.name = Path(root), name
        if not (self.root / LOSS_FUNCTIONS).is_file():
            raise FileNotFoundError(f"{self.root / LOSS_FUNCTIONS}: this NeMo-RL has no loss package")
        self.loss_class = load_loss_class(self.root)
        source = (self.root / LOSS_FUNCTIONS).read_text()
        self.capabilities, self.kl_forms = frozenset(capabilities(source)), kl_forms(source)

    def combination_needs(self, options: PolicyOptions) -> set[str]:
        return combination_needs(options, self.kl_forms)

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
        if entropy is not None and entropy_coef != 0:
            raise ValueError(f"{self.name}: ClippedPGLossFn has no entropy bonus (token_policy_entropy not declared)")
        config = loss_config(eps_clip=eps_clip, eps_clip_high=eps_clip_high, options=options, forms=self.kl_forms)
        loss_fn = self.loss_class(config)
        rows = log_probs.shape[0]
        generation = options.rollout_log_probs if options.rollout_correction is not None else old_log_probs
        data = {
            "token_mask": _with_first_column(loss_mask),
            "sample_mask": loss_mask.new_ones(rows),
            "advantages": _with_first_column(advantages),
            "prev_logprobs": _with_first_column(old_log_probs),
            "generation_logprobs": _with_first_column(generation),
        }
        if options.kl_coef != 0:
            data["reference_policy_logprobs"] = _with_first_column(options.ref_log_probs)
        loss, _metrics = loss_fn(
            log_probs,
            data,
            global_valid_seqs=torch.tensor(float(rows), device=log_probs.device),
            global_valid_toks=loss_mask.sum(),
        )
        return loss * rows if options.aggregation == "sum-of-sample-mean" else loss
