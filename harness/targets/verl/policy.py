"""verl's PPO policy loss (``verl/trainer/ppo/core_algos.py``) on the harness's packed batch.

verl's actor loss (``ppo_loss`` in ``verl/workers/utils/losses.py``, which
imports tensordict and the trainer, so its few lines are repeated here) takes
the per-sample log-probs and entropy of the logits processor
(``harness/targets/verl/token.py``) as ``[B, R]`` response matrices and:

1. ``policy_loss_fn = get_policy_loss_fn(config.policy_loss.loss_mode)``; the
   harness's PPO clip is loss mode ``"vanilla"``:
   ``compute_policy_loss_vanilla(old_log_prob, log_prob, advantages,
   response_mask, loss_agg_mode, config)`` with ``clip_ratio_low`` /
   ``clip_ratio_high`` from the harness's ``eps_clip`` / ``eps_clip_high`` and
   verl's default dual clip ``clip_ratio_c = 3`` (the harness's ratios stay
   near 1, where it never applies);
2. ``policy_loss -= entropy_coeff * agg_loss(entropy, response_mask, loss_agg_mode)``
   whenever the entropy was computed.

The aggregation that is the harness's ``sum_of_sample_mean`` is verl's
``loss_agg_mode = "seq-mean-token-mean"`` (per-sample masked token mean, then
the masked mean over samples) with ``global_batch_info = {global_batch_size: 1,
dp_size: 1}``: verl divides the sum of sample means by the global batch size
its trainer passes, so a global size of 1 leaves the sum. The response mask is
the harness's loss mask (verl's ``response_mask`` is its loss mask).
The samples' response rows are picked from the packed stream without CP
(``harness/targets/upstream/packing.py``): a row's log-prob and entropy depend
on that row only, and verl's labels are each sequence's next token (its roll
wraps a sequence's last position to its first token, a row no response reads).

The policy-loss options (docs/policy-losses.md), each declared where the
loaded verl has it (``capabilities``; probed by calling, so a revision
without one is UNSUPPORTED for it, never run as something else):

* ``loss_mode`` ``"vanilla"`` / ``"gspo"`` / ``"cispo"``; the dual clip is
  vanilla's ``clip_ratio_c`` (verl always applies it: ``3`` when the harness
  asks for none, a cap the harness's ratios, under ``e^0.4``, never reach);
  verl's GSPO and CISPO have no dual clip;
* ``loss_agg_mode`` for every term, with the engine's global batch
  information (``ppo_loss`` in ``verl/workers/utils/losses.py``):
  ``batch_num_tokens`` the whole batch's kept tokens, ``global_batch_size``
  every sample (1 for the harness's ``sum-of-sample-mean``, which is verl's
  ``seq-mean-token-mean`` times the batch size), ``loss_scale_factor`` the
  constant horizon, ``dp_size`` 1;
* the KL loss term ``kl_penalty(log_prob, ref_log_prob, kl_loss_type)``
  aggregated with the policy's mode: ``k1``, ``k2``, ``abs``, ``low_var_kl``
  (verl's ``k3`` is the clamped ``low_var_kl``, so the harness's unclamped
  ``k3`` is not declared; no ratio-weighted KL);
* ``rollout_is_weights`` from ``compute_rollout_correction_weights``
  (``verl/trainer/ppo/rollout_corr_helper.py``, loaded alone) on
  ``old - rollout``: TIS (a cap) per token or sequence, and IcePop (weights
  outside ``[lower, upper]`` zeroed: the harness's MIS) per token or
  sequence, whose lower bound must be positive: the harness's "no floor" is
  the smallest positive double, below any weight ``exp(x)`` of a finite
  ``x > -744``. No floor for TIS, no geometric level, and the rejection
  masks (``rollout_rs``) edit the response mask, which the harness's RS does
  not: not declared.

The same composition serves the packed entry (per-sample lists turned into
``[B, R]`` matrices as ``no_padding_2_padding`` does) and the token-level one
(``token_policy_loss``, matrices as given).
"""

from __future__ import annotations

import dataclasses
import inspect

import torch

from harness.targets.protocol import PolicyOptions
from harness.targets.upstream import packing
from harness.targets.upstream.settings import StrictSettings
from harness.targets.upstream.symbols import load_symbol

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


def supported(algos) -> bool:
    """The loaded core_algos has the vanilla PPO loss and the aggregation this mapping uses."""
    try:
        algos.get_policy_loss_fn(LOSS_MODES["ppo"])
    except (KeyError, ValueError):
        return False
    return hasattr(algos, "agg_loss")


def _accepts(fn, name: str) -> bool:
    return name in inspect.signature(fn).parameters


def _runs(fn, *args, **kwargs) -> bool:
    """``fn`` accepts these arguments (verl refuses an unknown mode or kind with one of these errors)."""
    try:
        fn(*args, **kwargs)
    except (KeyError, ValueError, NotImplementedError, TypeError):
        return False
    return True


def rollout_weights_function(root, algos):
    """verl's ``compute_rollout_correction_weights``, loaded alone (its module imports the trainer), or None."""
    path = root / ROLLOUT_CORRECTION
    if not path.is_file() or ROLLOUT_WEIGHTS not in path.read_text():
        return None
    return load_symbol(path, ROLLOUT_WEIGHTS, stand_ins={"verl_F": algos.verl_F})


def capabilities(algos, rollout_weights) -> set[str]:
    """The policy-loss options this verl has (see the module docstring), probed on the loaded functions."""
    caps = {
        f"policy_{kind}" for kind, mode in LOSS_MODES.items() if kind != "ppo" and _runs(algos.get_policy_loss_fn, mode)
    }
    if "clip_ratio_c" in inspect.getsource(algos.get_policy_loss_fn(LOSS_MODES["ppo"])):
        caps.add("policy_dual_clip")
    probe, mask = torch.zeros(1, 2), torch.ones(1, 2)
    if hasattr(algos, "kl_penalty"):
        caps |= {
            f"policy_kl_{kind}" for kind, name in KL_LOSS_TYPES.items() if _runs(algos.kl_penalty, probe, probe, name)
        }
    for mode, name in AGGREGATIONS.items():
        if mode == "sum-of-sample-mean" or (
            mode == "seq-mean-token-sum-norm" and not _accepts(algos.agg_loss, "loss_scale_factor")
        ):
            continue
        if _runs(algos.agg_loss, loss_mat=probe, loss_mask=mask, loss_agg_mode=name):
            caps.add(f"policy_agg_{mode}")
    if rollout_weights is not None:
        caps |= {f"policy_{mode}_{level}" for mode in ("tis", "mis") for level in ("token", "sequence")}
        caps.add("policy_mis_floor")
    return caps


def actor_settings(
    *, eps_clip, eps_clip_high, options=None, batch_size=1, kept_tokens=None, algos=None
) -> ActorSettings:
    """verl's actor config for the harness's clip range and options, with the engine's global batch information."""
    options = options if options is not None else PolicyOptions()
    info = {"global_batch_size": 1 if options.aggregation == "sum-of-sample-mean" else batch_size, "dp_size": 1}
    if algos is not None and _accepts(algos.agg_loss, "batch_num_tokens") and kept_tokens is not None:
        info["batch_num_tokens"] = kept_tokens
    if options.aggregation == "seq-mean-token-sum-norm":
        info["loss_scale_factor"] = options.horizon
    return ActorSettings(
        clip_ratio=eps_clip,
        clip_ratio_low=eps_clip,
        clip_ratio_high=eps_clip if eps_clip_high is None else eps_clip_high,
        clip_ratio_c=3.0 if options.dual_clip_c is None else options.dual_clip_c,
        global_batch_info=info,
    )


def rolled_labels(inputs, rows: int, device) -> torch.Tensor:
    """verl's labels for the packed stream: each sequence's tokens rolled by one (its last row: its first token)."""
    labels = torch.zeros(rows, dtype=torch.long, device=device)
    start = 0
    for tokens in inputs.tokens:
        tokens = tokens.to(device=device, dtype=torch.long)
        labels[start : start + tokens.numel()] = torch.roll(tokens, shifts=-1)
        start += tokens.numel()
    return labels


def response_rows(per_row: torch.Tensor, inputs) -> list[torch.Tensor]:
    """Each sample's response rows of a per-row vector over the packed stream (no CP)."""
    return packing.per_sample_rows(per_row, inputs, 1, 0)


def _matrix(values: list[torch.Tensor], width: int, dtype=None) -> torch.Tensor:
    """``[B, width]``, each row a sample's values then zeros (verl's ``no_padding_2_padding``)."""
    rows = [torch.nn.functional.pad(v if dtype is None else v.to(dtype), (0, width - v.numel())) for v in values]
    return torch.stack(rows) if rows else torch.zeros(0, width)


def _rollout_is_weights(rollout_weights, options, old, rollout, mask):
    """verl's detached rollout IS weights for the harness's correction (None: no correction)."""
    if options.rollout_correction is None:
        return None
    if options.rollout_correction == "tis":
        threshold = options.rollout_cap
    else:  # mis: IcePop, "lower_upper"
        threshold = (
            f"{options.rollout_floor if options.rollout_floor is not None else NO_FLOOR!r}_{options.rollout_cap!r}"
        )
    weights, _metrics = rollout_weights(
        log_ratio=old - rollout, response_mask=mask, rollout_is=options.rollout_level, rollout_is_threshold=threshold
    )
    return weights


def matrix_loss(
    algos, rollout_weights, log_prob, entropy, mask, *, old, adv, eps_clip, eps_clip_high, entropy_coef, options=None
):
    """verl's ``ppo_loss`` on ``[B, R]`` matrices: the loss mode's policy loss, minus entropy, plus KL.

    ``options`` is a ``PolicyOptions`` whose reference and rollout log-probs are ``[B, R]`` (None: plain PPO).
    """
    options = options if options is not None else PolicyOptions()
    response_mask = mask.to(bool)
    config = actor_settings(
        eps_clip=eps_clip,
        eps_clip_high=eps_clip_high,
        options=options,
        batch_size=int(mask.shape[0]),
        kept_tokens=mask.sum(),
        algos=algos,
    )
    mode = AGGREGATIONS[options.aggregation]
    # verl's GSPO and CISPO assert isinstance(config, ActorConfig); source.py binds that name to a placeholder.
    algos.ActorConfig = ActorSettings
    extra = {}
    weights = _rollout_is_weights(
        rollout_weights,
        options,
        old,
        None if options.rollout_log_probs is None else options.rollout_log_probs.to(old),
        response_mask,
    )
    if weights is not None:
        extra["rollout_is_weights"] = weights
    loss, _metrics = algos.get_policy_loss_fn(LOSS_MODES[options.kind])(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=adv,
        response_mask=response_mask,
        loss_agg_mode=mode,
        config=config,
        **extra,
    )
    if entropy is not None:
        entropy_loss = algos.agg_loss(
            loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=mode, **config.global_batch_info
        )
        loss = loss - entropy_coef * entropy_loss
    if options.kl_coef != 0:
        ref = options.ref_log_probs.to(log_prob)
        kld = algos.kl_penalty(logprob=log_prob, ref_logprob=ref, kl_penalty=KL_LOSS_TYPES[options.kl_kind])
        kl_loss = algos.agg_loss(loss_mat=kld, loss_mask=response_mask, loss_agg_mode=mode, **config.global_batch_info)
        loss = loss + kl_loss * options.kl_coef
    return loss


def ppo_loss(
    algos,
    rollout_weights,
    log_probs,
    entropy,
    inputs,
    *,
    advantages,
    old_log_probs,
    eps_clip,
    eps_clip_high,
    entropy_coef,
    options=None,
):
    """``matrix_loss`` on the packed entry's per-sample lists, padded to ``[B, R]`` as verl's engine pads them."""
    width = max((int(r) for r in inputs.response_lengths), default=0)
    log_prob = _matrix(log_probs, width)

    def padded(values):
        return None if values is None else _matrix([v.detach() for v in values], width, log_prob.dtype)

    if options is not None:
        options = dataclasses.replace(
            options, ref_log_probs=padded(options.ref_log_probs), rollout_log_probs=padded(options.rollout_log_probs)
        )
    return matrix_loss(
        algos,
        rollout_weights,
        log_prob,
        None if entropy is None else _matrix(entropy, width),
        _matrix([m.float() for m in inputs.loss_masks], width),
        old=padded(old_log_probs),
        adv=padded(advantages),
        eps_clip=eps_clip,
        eps_clip_high=eps_clip_high,
        entropy_coef=entropy_coef,
        options=options,
    )
