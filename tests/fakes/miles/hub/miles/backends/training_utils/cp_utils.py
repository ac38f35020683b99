"""Stand-in (tests only): miles' ``get_sum_of_sample_mean`` signature, one context-parallel rank."""

import torch

from .parallel import get_parallel_state


def get_sum_of_sample_mean(
    total_lengths, response_lengths, loss_masks, calculate_per_token_loss=False, qkv_format="thd", max_seq_lens=None
):
    assert get_parallel_state().cp.size == 1, "stand-in: no context parallelism"
    assert not calculate_per_token_loss

    def sum_of_sample_mean(x: torch.Tensor) -> torch.Tensor:
        total = x.new_zeros(())
        for values, mask in zip(x.split(list(response_lengths)), loss_masks):
            total = total + (values * mask).sum() / mask.sum().clamp(min=1)
        return total

    return sum_of_sample_mean
