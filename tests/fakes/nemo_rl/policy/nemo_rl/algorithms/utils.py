"""Stand-in for ``nemo_rl/algorithms/utils.py``: ``calculate_kl`` and ``masked_mean`` with NeMo-RL's signatures.

Written for the harness's tests in plain torch. The module imports packages
that are not installed (as the real one imports transformers and the
trainer), which a loader must never execute.
"""

import torch
from nemo_rl.utils.logger import Logger  # noqa: F401  (absent: must not run)


def calculate_kl(
    logprobs,
    logprobs_reference,
    kl_type="k3",
    input_clamp_value=20.0,
    output_clamp_value=10.0,
    importance_sampling_weights=None,
):
    """Per-token KL estimate of ``logprobs`` from the reference; weights multiply it before the output clamp."""
    log_ratio = logprobs_reference - logprobs
    if input_clamp_value is not None:
        clamped = log_ratio.clamp(-input_clamp_value, input_clamp_value)
        if importance_sampling_weights is not None:
            kept = log_ratio == clamped
            importance_sampling_weights = torch.where(
                kept, importance_sampling_weights, importance_sampling_weights.detach()
            )
        log_ratio = clamped
    estimators = {
        "k1": lambda x: -x,
        "k2": lambda x: x * x / 2,
        "k3": lambda x: x.exp() - x - 1,
    }
    if kl_type not in estimators:
        raise ValueError(f"unknown kl_type {kl_type}")
    value = estimators[kl_type](log_ratio)
    if importance_sampling_weights is not None:
        value = value * importance_sampling_weights
    if output_clamp_value is not None:
        value = value.clamp(-output_clamp_value, output_clamp_value)
    return value


def masked_mean(values, mask, dim: int | None = None, global_normalization_factor=None):
    """Sum of ``values * mask`` over ``dim`` divided by the mask's sum there, or by the global factor given."""
    total = (values * mask).sum() if dim is None else (values * mask).sum(dim=dim)
    if global_normalization_factor is None:
        global_normalization_factor = mask.sum() if dim is None else mask.sum(dim=dim)
    return total / (global_normalization_factor + 1e-8)
