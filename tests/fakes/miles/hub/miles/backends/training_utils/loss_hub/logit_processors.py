"""Stand-in (tests only): miles' packed API (results as a dict, the entropy gate as an argument)."""

import torch
from miles.backends.training_utils.loss_hub.math_utils import calculate_log_probs_and_entropy
from miles.backends.training_utils.parallel import get_parallel_state


def get_log_probs_and_entropy(
    logits,
    *,
    args,
    unconcat_tokens,
    total_lengths,
    response_lengths,
    with_entropy=False,
    entropy_requires_grad=True,
    non_loss_data=True,
    max_seq_lens=None,
):
    state = get_parallel_state()
    assert state.cp.size == 1, "stand-in: no context parallelism"
    assert not args.true_on_policy_mode
    assert logits.dim() == 3 and logits.size(0) == 1
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
        state.tp.group,
        with_entropy=with_entropy,
        entropy_requires_grad=entropy_requires_grad,
        chunk_size=args.log_probs_chunk_size,
    )
    log_prob = log_prob.squeeze(-1)
    res = {"log_probs": []}
    if with_entropy:
        res["entropy"] = []
    offset = 0
    for total, response in zip(total_lengths, response_lengths):
        rows = slice(offset + total - response - 1, offset + total - 1)
        res["log_probs"].append(log_prob[rows])
        if with_entropy:
            res["entropy"].append(entropy[rows])
        offset += total
    return res
