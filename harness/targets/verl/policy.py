"""verl's PPO policy loss on the harness's batch: ``ppo_loss`` of ``verl/workers/utils/losses.py``, called.

verl's actor loss ``ppo_loss(config, model_output, data)`` is what runs: it
picks each sample's response from the engine's per-position output
(``no_padding_2_padding``), sets the global batch information, calls the loss
mode's function from the registry (``get_policy_loss_fn``), subtracts
``entropy_coeff`` times the aggregated entropy whenever the entropy was
computed, and adds the aggregated KL term (``kl_penalty``) when
``use_kl_loss``. The adapter translates:

* ``config``: verl's ``ActorConfig`` as a strict settings object
  (``ActorSettings``: a setting the adapter does not map raises, naming it):
  ``clip_ratio_low`` / ``clip_ratio_high`` from ``eps_clip`` /
  ``eps_clip_high``, ``clip_ratio_c`` (the dual clip, which verl's vanilla
  loss always applies: the harness's "no dual clip" is a cap that never binds,
  ``inf``; verl's default ``3`` binds at ratios above 3 with a negative
  advantage, which the far-ratio regime reaches), ``loss_agg_mode``, ``policy_loss.loss_mode``
  (``vanilla``, ``gspo``, ``cispo``), ``entropy_coeff``, the KL settings,
  ``loss_scale_factor`` (the constant horizon of ``seq-mean-token-sum-norm``);
* ``data``: the TensorDict as ``ppo_loss`` reads it (``Batch``): the prompt
  and response lengths (nested), ``response_mask`` (the harness's loss mask),
  ``old_log_probs``, ``advantages``, ``ref_log_prob``, ``rollout_is_weights``
  (``[B, R]``, rows padded with zeros), ``dp_size`` 1, ``batch_num_tokens``
  the batch's kept tokens, ``global_batch_size`` every sample, or 1 for the
  harness's ``sum-of-sample-mean`` (verl's ``seq-mean-token-mean`` divided by
  the global batch size: 1 leaves the sum of sample means);
* ``model_output``: the engine forward's sequences (packed entry), or each
  ``[B, R]`` row as a sequence of a one-token prompt and its response
  (token-level entry);
* ``rollout_is_weights``: what verl's trainer puts in the batch,
  ``compute_rollout_correction_weights`` (``verl/trainer/ppo/rollout_corr_helper.py``,
  loaded alone: its module imports the trainer) on ``old - rollout``: TIS (a
  cap) per token or sequence, IcePop (weights outside ``[lower, upper]``
  zeroed: the harness's MIS) per token or sequence, whose lower bound must be
  positive: the harness's "no floor" is the smallest positive double, below
  any weight ``exp(x)`` of a finite ``x > -744``.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import torch

from harness.targets.protocol import PolicyOptions
from harness.targets.upstream.family import Option
from harness.targets.upstream.settings import StrictSettings

LOSS_MODES = {"ppo": "vanilla", "gspo": "gspo", "cispo": "cispo"}
KL_LOSS_TYPES = {"k1": "k1", "k2": "k2", "abs": "abs", "low_var_kl": "low_var_kl"}
AGGREGATIONS = {  # the harness's mode -> verl's loss_agg_mode
    "sum-of-sample-mean": "seq-mean-token-mean",  # with global_batch_size = 1
    "token-mean": "token-mean",
    "token-sum": "token-sum",
    "seq-mean-token-sum": "seq-mean-token-sum",
    "seq-mean-token-mean": "seq-mean-token-mean",
    "seq-mean-token-sum-norm": "seq-mean-token-sum-norm",
}
ROLLOUT_CORRECTION = "verl/trainer/ppo/rollout_corr_helper.py"
ROLLOUT_WEIGHTS = "compute_rollout_correction_weights"
NO_FLOOR = 5e-324  # IcePop's lower bound must be positive: below every weight exp(x), x > -744


class ActorSettings(StrictSettings):
    """verl's ``ActorConfig`` as the adapter fills it; ``get`` answers verl's own default for an unset key."""

    READ_AS = "verl actor config"
    MAPPED_IN = "harness/targets/verl/policy.py (actor_settings)"

    def get(self, key, default=None):
        return self.__dict__.get(key, default)


def _accepts(fn, name: str) -> bool:
    return name in inspect.signature(fn).parameters


def _runs(fn, *args, **kwargs) -> bool:
    """``fn`` accepts these arguments (verl refuses an unknown mode or kind with one of these errors)."""
    try:
        fn(*args, **kwargs)
    except (KeyError, ValueError, NotImplementedError, TypeError):
        return False
    return True


def rollout_weights(up):
    """verl's ``compute_rollout_correction_weights``, loaded alone (its module imports the trainer), or None."""
    if up.verl_F is None or not (up.root / ROLLOUT_CORRECTION).is_file():
        return None
    try:
        return up.loader.symbol(ROLLOUT_CORRECTION, ROLLOUT_WEIGHTS, stand_ins={"verl_F": up.verl_F})
    except LookupError:
        return None


def _registered(mode: str):
    def holds(up) -> bool:
        return _runs(up.get_policy_loss_fn, mode)

    holds.__doc__ = f"verl's policy-loss registry has {mode!r}"
    return holds


def _kl(kind: str):
    def holds(up) -> bool:
        probe = torch.zeros(1, 2)
        return up.kl_penalty is not None and _runs(up.kl_penalty, probe, probe, KL_LOSS_TYPES[kind])

    holds.__doc__ = f"verl's kl_penalty takes {KL_LOSS_TYPES[kind]!r}"
    return holds


def _aggregation(mode: str):
    def holds(up) -> bool:
        if mode == "seq-mean-token-sum-norm" and not _accepts(up.agg_loss, "loss_scale_factor"):
            return False
        return _runs(
            up.agg_loss, loss_mat=torch.zeros(1, 2), loss_mask=torch.ones(1, 2), loss_agg_mode=AGGREGATIONS[mode]
        )

    holds.__doc__ = f"verl's agg_loss takes {AGGREGATIONS[mode]!r}"
    return holds


def _has_rollout_weights(up) -> bool:
    """verl's trainer has ``compute_rollout_correction_weights`` (``verl/trainer/ppo/rollout_corr_helper.py``),
    which makes the rollout-correction weights its loss reads."""
    return up.rollout_weights is not None


# Each extends token_policy_loss: both policy entries run the same composition (matrix_loss).
OPTIONS = (
    *(Option(f"policy_{kind}", (_registered(LOSS_MODES[kind]),), "token_policy_loss") for kind in ("gspo", "cispo")),
    # the vanilla loss's dual clip is its config's clip_ratio_c (inf when the harness asks for none)
    Option("policy_dual_clip", (_registered("vanilla"),), "token_policy_loss"),
    *(Option(f"policy_kl_{kind}", (_kl(kind),), "token_policy_loss") for kind in KL_LOSS_TYPES),
    *(
        Option(f"policy_agg_{mode}", (_aggregation(mode),), "token_policy_loss")
        for mode in AGGREGATIONS
        if mode != "sum-of-sample-mean"
    ),
    *(
        Option(f"policy_{mode}_{level}", (_has_rollout_weights,), "token_policy_loss")
        for mode in ("tis", "mis")
        for level in ("token", "sequence")
    ),
    Option("policy_mis_floor", (_has_rollout_weights,), "token_policy_loss"),
)
NOT_DECLARED = {
    "policy_gspo_dual_clip": "verl's GSPO has no dual clip",
    "policy_kl_k3": "verl's k3 is the clamped low_var_kl (declared as policy_kl_low_var_kl)",
    "policy_kl_ratio_weighted": "verl's KL loss term is not weighted by the ratio",
    "policy_tis_floor": "verl's TIS has a cap only",
    "policy_tis_geometric": "verl has no geometric-mean rollout weight",
    "policy_mis_geometric": "verl has no geometric-mean rollout weight",
    **{
        f"policy_rs_{level}": "verl's rollout_rs edits the response mask; the harness's RS does not"
        for level in ("token", "sequence", "geometric")
    },
    "policy_rs_floor": "as policy_rs_token",
}


class Batch:
    """The TensorDict ``ppo_loss`` reads, as it reads it: entries by key, ``get``, ``select``, ``to_padded_tensor``."""

    def __init__(self, **entries):
        self.entries = entries

    def __getitem__(self, key):
        return self.entries[key]

    def __contains__(self, key):
        return key in self.entries

    def get(self, key, default=None):
        return self.entries.get(key, default)

    def select(self, *keys):
        return Batch(**{key: self.entries[key] for key in keys})

    def to_padded_tensor(self):
        return Batch(**{k: v.to_padded_tensor(0.0) if v.is_nested else v for k, v in self.entries.items()})


def actor_settings(options, *, eps_clip, eps_clip_high, entropy_coef) -> ActorSettings:
    """verl's actor config for the harness's clip range, entropy coefficient and options."""
    return ActorSettings(
        clip_ratio=eps_clip,
        clip_ratio_low=eps_clip,
        clip_ratio_high=eps_clip if eps_clip_high is None else eps_clip_high,
        clip_ratio_c=math.inf if options.dual_clip_c is None else options.dual_clip_c,  # inf: a cap never reached
        loss_agg_mode=AGGREGATIONS[options.aggregation],
        policy_loss=ActorSettings(loss_mode=LOSS_MODES[options.kind]),
        loss_scale_factor=options.horizon if options.aggregation == "seq-mean-token-sum-norm" else None,
        global_batch_info={},
        entropy_coeff=entropy_coef,
        use_kl_loss=options.kl_coef != 0,
        kl_loss_type=KL_LOSS_TYPES.get(options.kl_kind),
        kl_loss_coef=options.kl_coef,
    )


def lengths_nested(lengths, device) -> torch.Tensor:
    """A nested tensor of these lengths (its values unread: ``no_padding_2_padding`` reads the offsets)."""
    offsets = torch.tensor([0, *lengths], device=device).cumsum(0)
    return torch.nested.nested_tensor_from_jagged(torch.zeros(int(offsets[-1]), device=device), offsets=offsets)


def _rollout_is_weights(up, options, old, rollout, mask):
    """verl's detached rollout IS weights for the harness's correction."""
    if options.rollout_correction == "tis":
        threshold = options.rollout_cap
    else:  # mis: IcePop, "lower_upper"
        threshold = (
            f"{options.rollout_floor if options.rollout_floor is not None else NO_FLOOR!r}_{options.rollout_cap!r}"
        )
    weights, _metrics = up.rollout_weights(
        log_ratio=old - rollout, response_mask=mask, rollout_is=options.rollout_level, rollout_is_threshold=threshold
    )
    return weights


def loss(up, output: dict, lengths, mask, *, old, adv, eps_clip, eps_clip_high, entropy_coef, options=None):
    """verl's ``ppo_loss(config, output, data)`` (see the module docstring).

    ``output``: ``{"log_probs", "entropy"?}`` per position of each sequence (position ``p``: token ``p + 1``);
    ``lengths``: each sequence's (total, response); ``mask``, ``old``, ``adv`` and the options' reference and
    rollout log-probs: ``[B, R]`` (rows padded with zeros).
    """
    options = options if options is not None else PolicyOptions()
    device = mask.device
    response_mask = mask.to(bool)
    data = {
        "prompts": lengths_nested([total - response for total, response in lengths], device),
        "responses": lengths_nested([response for _, response in lengths], device),
        "dp_size": 1,
        "batch_num_tokens": mask.sum(),
        "global_batch_size": 1 if options.aggregation == "sum-of-sample-mean" else len(lengths),
        "response_mask": response_mask,
        "old_log_probs": old,
        "advantages": adv,
    }
    if options.rollout_correction is not None:
        rollout = options.rollout_log_probs.to(old)
        data["rollout_is_weights"] = _rollout_is_weights(up, options, old, rollout, response_mask)
    if options.kl_coef != 0:
        data["ref_log_prob"] = options.ref_log_probs.to(old)
    config = actor_settings(options, eps_clip=eps_clip, eps_clip_high=eps_clip_high, entropy_coef=entropy_coef)
    value, _metrics = up.ppo_loss(config, output, Batch(**data))
    return value


def _matrix(values: list[torch.Tensor], width: int, dtype=None) -> torch.Tensor:
    """``[B, width]``, each row a sample's values then zeros."""
    rows = [torch.nn.functional.pad(v if dtype is None else v.to(dtype), (0, width - v.numel())) for v in values]
    return torch.stack(rows) if rows else torch.zeros(0, width)


def packed_loss(up, output: dict, inputs, *, advantages, old_log_probs, options=None, **settings):
    """``loss`` on the engine forward's sequences, the harness's per-sample vectors padded to ``[B, R]``."""
    width = max((int(r) for r in inputs.response_lengths), default=0)

    def padded(values):
        return None if values is None else _matrix([v.detach() for v in values], width, torch.float32)

    if options is not None:
        options = dataclasses.replace(
            options, ref_log_probs=padded(options.ref_log_probs), rollout_log_probs=padded(options.rollout_log_probs)
        )
    lengths = [(int(t), int(r)) for t, r in zip(inputs.total_lengths, inputs.response_lengths)]
    mask = _matrix([m.float() for m in inputs.loss_masks], width)
    return loss(
        up, output, lengths, mask, old=padded(old_log_probs), adv=padded(advantages), options=options, **settings
    )


def matrix_loss(up, log_probs, entropy, mask, *, old, adv, options=None, **settings):
    """``loss`` on ``[B, R]`` matrices: each row the response of a sequence with a one-token prompt."""
    rows, width = log_probs.shape

    def sequences(matrix):
        return torch.cat([matrix, matrix.new_zeros(rows, 1)], dim=1).reshape(-1)  # position p: token p + 1

    output = {"log_probs": sequences(log_probs)}
    if entropy is not None:
        output["entropy"] = sequences(entropy)
    return loss(up, output, [(width + 1, width)] * rows, mask, old=old, adv=adv, options=options, **settings)
