"""Stand-in (tests only): the newer slime packed API (whole stream at once, ``(empty, results)`` returned)."""

import torch
from megatron.core import mpu
from slime.utils.ppo_utils import calculate_log_probs_and_entropy, compute_policy_loss


def get_log_probs_and_entropy(
    logits, *, args, unconcat_tokens, total_lengths, response_lengths, with_entropy=False, non_loss_data=True
):
    assert mpu.get_context_parallel_world_size() == 1, "stand-in: no context parallelism"
    assert logits.dtype == torch.float32 and logits.dim() == 3 and logits.size(0) == 1
    logits = logits.squeeze(0)
    if args.rollout_temperature != 1.0:
        logits = logits / args.rollout_temperature
    shifted = torch.zeros(logits.size(0), dtype=torch.long, device=logits.device)
    offset = 0
    for tokens, total in zip(unconcat_tokens, total_lengths):
        shifted[offset : offset + total - 1] = tokens[1:total]
        offset += total
    log_prob, entropy = calculate_log_probs_and_entropy(
        logits,
        shifted,
        mpu.get_tensor_model_parallel_group(),
        with_entropy=with_entropy,
        chunk_size=args.log_probs_chunk_size,
        with_entropy_grad=with_entropy and args.entropy_coef != 0,
    )
    log_prob = log_prob.squeeze(-1)
    res = {"log_probs": [], "entropy": []}
    offset = 0
    for total, response in zip(total_lengths, response_lengths):
        rows = slice(offset + total - response - 1, offset + total - 1)
        res["log_probs"].append(log_prob[rows])
        if with_entropy:
            res["entropy"].append(entropy[rows])
        offset += total
    if not with_entropy:
        del res["entropy"]
    return torch.empty((0,)), res


def policy_loss_function(args, batch, logits, sum_of_sample_mean):
    _, res = get_log_probs_and_entropy(
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
    return loss, {"loss": loss.detach(), "entropy_loss": entropy_loss.detach()}
