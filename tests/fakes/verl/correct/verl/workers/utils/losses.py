"""Stand-in (tests only): verl's actor loss ``ppo_loss``, with the signature and steps of verl's.

Each sample's response picked from the per-position output (position ``p``
holds token ``p + 1``), the loss mode's function from the registry, minus the
entropy coefficient times the aggregated entropy whenever the entropy was
computed. ``ENTROPY_TERM`` is what a defective tree changes (a composition
that leaves out its entropy step).
"""

import torch
from tensordict import TensorDict  # noqa: F401  (import-only: the harness stands it in)
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn
from verl.utils.metric import AggregationType, Metric

ENTROPY_TERM = True


def no_padding_2_padding(output, data):  # verl imports it from its padding utilities (from #3600)
    values = output.values() if output.is_nested else output
    mask, prompt_width = data["attention_mask"], data["prompts"].shape[1]  # the trainer's left-right padded batch
    prompts, responses = mask[:, :prompt_width].sum(1), mask[:, prompt_width:].sum(1)
    ends = (prompts + responses).cumsum(0)
    width = data["responses"].shape[1]
    rows = [values[end - length - 1 : end - 1] for end, length in zip(ends.tolist(), responses.tolist())]
    return torch.stack([torch.nn.functional.pad(row, (0, width - row.shape[0])) for row in rows])


def ppo_loss(config, model_output, data, dp_group=None):
    log_prob = no_padding_2_padding(model_output["log_probs"], data)
    entropy = model_output.get("entropy", None)
    config.global_batch_info.update(dp_size=data["dp_size"], global_batch_size=data["global_batch_size"])
    padded = data.select("response_mask", "old_log_probs", "advantages").to_padded_tensor()
    mask = padded["response_mask"].to(bool)
    mode = config.loss_agg_mode
    loss, metrics = get_policy_loss_fn(config.policy_loss.get("loss_mode", "vanilla"))(
        old_log_prob=padded["old_log_probs"], log_prob=log_prob, advantages=padded["advantages"],
        response_mask=mask, loss_agg_mode=mode, config=config,
    )  # fmt: skip
    metrics = Metric.from_dict(metrics, aggregation=AggregationType.MEAN)
    if entropy is not None and ENTROPY_TERM:
        entropy_loss = agg_loss(no_padding_2_padding(entropy, data), mask, mode, **config.global_batch_info)
        loss = loss - config.entropy_coeff * entropy_loss
    return loss, metrics
