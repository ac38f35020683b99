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

verl's other loss modes and options (for the policy-loss options of
docs/policy-losses.md): dual clip ``clip_ratio_c`` (vanilla, always on), GSPO
(``"gspo"``), CISPO (``"cispo"``), SAPO, GPG, clip-cov / KL-cov, geo-mean,
DPPO-TV/KL, DRO, bypass mode; TIS/MIS by ``rollout_is_weights``; aggregation
modes ``token-mean``, ``token-sum``, ``seq-mean-token-sum``,
``seq-mean-token-sum-norm``, ``seq-mean-token-mean`` (``agg_loss``); KL
``kl_penalty`` (k1 ``kl``, ``abs``, k2 ``mse``, k3 ``low_var_kl``, and their
``+`` straight-through variants).
"""

from __future__ import annotations

import torch

from harness.targets.upstream import packing
from harness.targets.upstream.settings import StrictSettings

LOSS_AGG_MODE = "seq-mean-token-mean"
LOSS_MODE = "vanilla"


class ActorSettings(StrictSettings):
    """verl's ``ActorConfig`` as the adapter fills it; ``get`` answers verl's own default for an unset key."""

    READ_AS = "verl actor config"
    MAPPED_IN = "harness/targets/verl/policy.py (actor_settings)"

    def get(self, key, default=None):
        return self.__dict__.get(key, default)


def supported(algos) -> bool:
    """The loaded core_algos has the vanilla PPO loss and the aggregation this mapping uses."""
    try:
        algos.get_policy_loss_fn(LOSS_MODE)
    except (KeyError, ValueError):
        return False
    return hasattr(algos, "agg_loss")


def actor_settings(*, eps_clip, eps_clip_high) -> ActorSettings:
    return ActorSettings(
        clip_ratio=eps_clip,
        clip_ratio_low=eps_clip,
        clip_ratio_high=eps_clip if eps_clip_high is None else eps_clip_high,
        clip_ratio_c=3.0,
        global_batch_info={"global_batch_size": 1, "dp_size": 1},
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


def ppo_loss(algos, log_probs, entropy, inputs, *, advantages, old_log_probs, eps_clip, eps_clip_high, entropy_coef):
    """verl's vanilla PPO loss plus its entropy term, in seq-mean-token-mean with a global batch size of 1."""
    width = max((int(r) for r in inputs.response_lengths), default=0)
    config = actor_settings(eps_clip=eps_clip, eps_clip_high=eps_clip_high)
    mask = _matrix([m.float() for m in inputs.loss_masks], width)
    log_prob = _matrix(log_probs, width)
    old = _matrix([o.detach() for o in old_log_probs], width, log_prob.dtype)
    adv = _matrix([a.detach() for a in advantages], width, log_prob.dtype)
    policy_loss_fn = algos.get_policy_loss_fn(LOSS_MODE)
    loss, _metrics = policy_loss_fn(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode=LOSS_AGG_MODE,
        config=config,
    )
    if entropy is not None:
        entropy_loss = algos.agg_loss(
            loss_mat=_matrix(entropy, width), loss_mask=mask, loss_agg_mode=LOSS_AGG_MODE, **config.global_batch_info
        )
        loss = loss - entropy_coef * entropy_loss
    return loss
