"""Stand-in (tests only): the older per-sample packed API, with the INVERTED entropy gate of slime PR #1185."""

from contextlib import nullcontext

import torch
from megatron.core import mpu
from slime.utils.ppo_utils import compute_entropy_from_logits, compute_log_probs, compute_policy_loss


def get_responses(logits, *, args, unconcat_tokens, total_lengths, response_lengths):
    assert mpu.get_context_parallel_world_size() == 1, "stand-in: no context parallelism"
    logits = logits.squeeze(0).div(args.rollout_temperature)
    end = 0
    for tokens, total, response in zip(unconcat_tokens, total_lengths, response_lengths):
        end += total
        yield logits[end - response - 1 : end - 1], tokens[total - response :]


def get_log_probs_and_entropy(
    logits, *, args, unconcat_tokens, total_lengths, response_lengths, with_entropy=False, non_loss_data=True
):
    tp_group = mpu.get_tensor_model_parallel_group()
    log_probs, entropies = [], []
    for rows, targets in get_responses(
        logits,
        args=args,
        unconcat_tokens=unconcat_tokens,
        total_lengths=total_lengths,
        response_lengths=response_lengths,
    ):
        rows = rows.contiguous()
        empty = rows.size(0) == 0
        log_prob = rows.new_zeros((0, 1)) if empty else compute_log_probs(rows.clone(), targets, tp_group)
        log_probs.append(log_prob.squeeze(-1))
        if with_entropy:
            # The bug under test: the condition is the wrong way round.
            with torch.no_grad() if args.entropy_coef else nullcontext():
                entropies.append(rows.new_zeros((0,)) if empty else compute_entropy_from_logits(rows.clone(), tp_group))
    res = {"log_probs": log_probs}
    if with_entropy:
        res["entropy"] = entropies
    return res


def policy_loss_function(args, batch, logits, sum_of_sample_mean):
    res = get_log_probs_and_entropy(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"],
        with_entropy=True,
    )
    log_probs = torch.cat(res["log_probs"])
    ppo_kl = torch.cat(batch["log_probs"]) - log_probs
    pg_loss, _ = compute_policy_loss(ppo_kl, torch.cat(batch["advantages"]), args.eps_clip, args.eps_clip_high)
    entropy_loss = sum_of_sample_mean(torch.cat(res["entropy"]))
    loss = sum_of_sample_mean(pg_loss) - args.entropy_coef * entropy_loss
    if log_probs.numel() == 0:
        loss = loss + 0 * logits.sum()
    return loss, {"loss": loss.detach(), "entropy_loss": entropy_loss.detach()}
