"""Stand-in (tests only): per-sample packed API without any entropy gate (every entropy keeps its graph)."""

import torch
from megatron.core import mpu
from slime.utils.ppo_utils import calculate_log_probs_and_entropy, compute_policy_loss


def get_log_probs_and_entropy(
    logits, *, args, unconcat_tokens, total_lengths, response_lengths, with_entropy=False, non_loss_data=True
):
    assert mpu.get_context_parallel_world_size() == 1, "stand-in: no context parallelism"
    logits = logits.squeeze(0).div(args.rollout_temperature)
    res = {"log_probs": [], "entropy": []}
    end = 0
    for tokens, total, response in zip(unconcat_tokens, total_lengths, response_lengths):
        end += total
        log_prob, entropy = calculate_log_probs_and_entropy(
            logits[end - response - 1 : end - 1],
            tokens[total - response :],
            mpu.get_tensor_model_parallel_group(),
            with_entropy=with_entropy,
        )
        res["log_probs"].append(log_prob.squeeze(-1))
        res["entropy"].append(entropy)
    if not with_entropy:
        del res["entropy"]
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
    loss = sum_of_sample_mean(pg_loss) - args.entropy_coef * sum_of_sample_mean(torch.cat(res["entropy"]))
    return loss, {"loss": loss.detach()}
