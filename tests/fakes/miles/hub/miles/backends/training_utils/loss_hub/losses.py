"""Stand-in (tests only): miles' ``policy_loss_function``, which imports the packed entry point by name."""

import torch
from miles.backends.training_utils.loss_hub.logit_processors import get_log_probs_and_entropy
from miles.backends.training_utils.loss_hub.math_utils import compute_policy_loss


def policy_loss_function(args, batch, logits, sum_of_sample_mean):
    calculate_entropy = args.entropy_coef != 0 or args.observe_training_entropy
    res = get_log_probs_and_entropy(
        logits,
        args=args,
        unconcat_tokens=batch["unconcat_tokens"],
        total_lengths=batch["total_lengths"],
        response_lengths=batch["response_lengths"],
        with_entropy=calculate_entropy,
        entropy_requires_grad=args.entropy_coef != 0,
    )
    log_probs = torch.cat(res["log_probs"])
    ppo_kl = torch.cat(batch["log_probs"]) - log_probs
    pg_loss, _ = compute_policy_loss(ppo_kl, torch.cat(batch["advantages"]), args.eps_clip, args.eps_clip_high)
    loss = sum_of_sample_mean(pg_loss)
    if calculate_entropy:
        loss = loss - args.entropy_coef * sum_of_sample_mean(torch.cat(res["entropy"]))
    return loss, {"loss": loss.detach()}
