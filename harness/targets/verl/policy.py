"""verl's PPO policy loss on the harness's batch: ``ppo_loss`` of ``verl/workers/utils/losses.py``, called whole.
The adapter translates its ``config`` (``ActorSettings``), its ``data`` (``Batch``) and the rollout-correction
weights verl's trainer puts in the batch (``compute_rollout_correction_weights``).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from harness.targets.protocol import PolicyOptions
from harness.targets.upstream.family import Option, parameters
from harness.targets.upstream.settings import StrictSettings
from harness.targets.verl.packed import whole_from_views

LOSS_MODES = {"ppo": "vanilla", "gspo": "gspo", "cispo": "cispo"}
KL_KINDS = ("k1", "k2", "abs", "low_var_kl")  # verl's kl_loss_type names, the harness's too
_VERLS = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# the harness's mode -> verl's loss_agg_mode (sum-of-sample-mean: with global_batch_size = 1)
AGGREGATIONS = {"sum-of-sample-mean": "seq-mean-token-mean", **dict(zip(_VERLS, _VERLS))}
ROLLOUT_CORRECTION = "verl/trainer/ppo/rollout_corr_helper.py"
NO_FLOOR = 5e-324  # IcePop's lower bound must be positive: below every weight exp(x) of a finite x > -744


class ActorSettings(StrictSettings):
    """verl's ``ActorConfig``; ``get`` answers verl's own default for an unset key."""

    READ_AS = "verl actor config"
    MAPPED_IN = "harness/targets/verl/policy.py (loss)"

    def get(self, key, default=None):
        return self.__dict__.get(key, default)


def rollout_weights(up):
    """verl's ``compute_rollout_correction_weights``, loaded alone (its module imports the trainer), or None."""
    verl_F = up.modules["torch_functional"]  # noqa: N806  (the name the module imports it by)
    if verl_F is None:
        return None
    name = "compute_rollout_correction_weights"
    return up.loader.symbol_if_present(ROLLOUT_CORRECTION, name, stand_ins={"verl_F": verl_F})


def _runs(doc: str, name: str, *args, needs: str = "", **kwargs):
    """An ``Option`` condition: the revision's ``name`` (taking ``needs``, if given) accepts these arguments (verl
    refuses an unknown mode or kind with one of these errors): data the revision holds, not its source text."""

    def holds(up) -> bool:
        fn = getattr(up, name)
        if needs and needs not in parameters(fn):
            return False
        try:
            fn(*args, **kwargs)
        except (KeyError, ValueError, NotImplementedError, TypeError):
            return False
        return True

    holds.__doc__ = doc
    return holds


_ZEROS = (torch.zeros(1, 2), torch.zeros(1, 2))  # the probes' log-probs
_DECLARED_BY = {  # each option: what declares it where present (the vanilla loss's dual clip: clip_ratio_c)
    **{
        f"policy_{kind}": _runs(f"verl's policy-loss registry has {mode!r}", "get_policy_loss_fn", mode)
        for kind, mode in (("gspo", "gspo"), ("cispo", "cispo"), ("dual_clip", "vanilla"))
    },
    **{
        f"policy_kl_{kind}": _runs(f"verl's kl_penalty takes {kind!r}", "kl_penalty", *_ZEROS, kind)
        for kind in KL_KINDS
    },
    **{
        f"policy_agg_{mode}": _runs(
            f"verl's agg_loss takes {mode!r}",
            "agg_loss",
            needs="loss_scale_factor" if mode == "seq-mean-token-sum-norm" else "",
            loss_mat=torch.zeros(1, 2),
            loss_mask=torch.ones(1, 2),
            loss_agg_mode=mode,
        )
        for mode in _VERLS
    },
    # the trainer's compute_rollout_correction_weights (prepare loads it alone) makes the weights its loss reads
    **{
        f"policy_{r}": "rollout_weights"
        for r in ("tis_token", "tis_sequence", "mis_token", "mis_sequence", "mis_floor")
    },
}
# Each extends token_policy_loss: both policy entries run the same composition (loss).
OPTIONS = tuple(Option(capability, (when,), "token_policy_loss") for capability, when in _DECLARED_BY.items())
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


class Batch(dict):
    """The TensorDict ``ppo_loss`` reads, as it reads it: entries by key, ``get``, ``select``, ``to_padded_tensor``."""

    def select(self, *keys):
        return Batch({key: self[key] for key in keys})

    def to_padded_tensor(self):
        return Batch({k: v.to_padded_tensor(0.0) if v.is_nested else v for k, v in self.items()})


def _lengths_nested(lengths, device) -> torch.Tensor:
    """A nested tensor of these lengths (its values unread: ``no_padding_2_padding`` reads the offsets)."""
    offsets = torch.tensor([0, *lengths], device=device).cumsum(0)
    return torch.nested.nested_tensor_from_jagged(torch.zeros(int(offsets[-1]), device=device), offsets=offsets)


def loss(up, call, output: dict, lengths, mask):
    """verl's ``ppo_loss(config, output, data)``: ``output`` per position of each sequence (position ``p``: token
    ``p + 1``), ``lengths`` each sequence's (total, response); ``mask``, the call's advantages, old log-probs and its
    options' reference and rollout log-probs ``[B, R]`` (rows padded with zeros)."""
    old, options = call.old_log_probs, call.options if call.options is not None else PolicyOptions()
    device, response_mask = mask.device, mask.to(bool)
    data = {
        "prompts": _lengths_nested([total - response for total, response in lengths], device),
        "responses": _lengths_nested([response for _, response in lengths], device),
        "dp_size": 1,
        "batch_num_tokens": mask.sum(),
        "global_batch_size": 1 if options.aggregation == "sum-of-sample-mean" else len(lengths),
        "response_mask": response_mask,
        "old_log_probs": old,
        "advantages": call.advantages,
    }
    if options.rollout_correction is not None:  # IcePop (the harness's MIS) is "lower_upper"
        floor = options.rollout_floor if options.rollout_floor is not None else NO_FLOOR
        threshold = options.rollout_cap if options.rollout_correction == "tis" else f"{floor!r}_{options.rollout_cap!r}"
        data["rollout_is_weights"], _metrics = up.rollout_weights(
            log_ratio=old - options.rollout_log_probs.to(old),
            response_mask=response_mask,
            rollout_is=options.rollout_level,
            rollout_is_threshold=threshold,
        )
    if options.kl_coef != 0:
        data["ref_log_prob"] = options.ref_log_probs.to(old)
    config = ActorSettings(
        clip_ratio=call.eps_clip,
        clip_ratio_low=call.eps_clip,
        clip_ratio_high=call.clip_high,
        clip_ratio_c=math.inf if options.dual_clip_c is None else options.dual_clip_c,  # inf: a cap never reached
        loss_agg_mode=AGGREGATIONS[options.aggregation],
        policy_loss=ActorSettings(loss_mode=LOSS_MODES[options.kind]),
        loss_scale_factor=options.horizon if options.aggregation == "seq-mean-token-sum-norm" else None,
        global_batch_info={},
        entropy_coeff=call.entropy_coef,
        use_kl_loss=options.kl_coef != 0,
        kl_loss_type=options.kl_kind if options.kl_kind in KL_KINDS else None,
        kl_loss_coef=options.kl_coef,
    )
    value, _metrics = up.ppo_loss(config, output, Batch(data))
    return value


def packed_loss(up, call, output: dict):
    """``loss`` on the engine forward's sequences, the call's per-sample vectors padded to ``[B, R]``; under CP
    verl's loss reads the whole (gathered) batch on every rank, so the vectors, each rank's views, are made whole."""
    inputs, options = call.inputs, call.options
    width = max((int(r) for r in inputs.response_lengths), default=0)

    def matrix(values: list[torch.Tensor]) -> torch.Tensor:  # [B, width], each row a sample's values then zeros
        rows = [torch.nn.functional.pad(v, (0, width - v.numel())) for v in values]
        return torch.stack(rows) if rows else torch.zeros(0, width)

    def padded(values, name):
        if values is None:
            return None
        if call.cp[0] > 1:
            values = whole_from_views(values, inputs, call.cp_group, name)
        return matrix([v.detach().to(torch.float32) for v in values])

    vectors = {name: padded(getattr(call, name), name) for name in ("advantages", "old_log_probs")}
    if options is not None:
        options = dataclasses.replace(
            options, **{name: padded(getattr(options, name), name) for name in ("ref_log_probs", "rollout_log_probs")}
        )
    lengths = [(int(t), int(r)) for t, r in zip(inputs.total_lengths, inputs.response_lengths)]
    mask = matrix([m.float() for m in inputs.loss_masks])
    return loss(up, call.replace(**vectors, options=options), output, lengths, mask)
