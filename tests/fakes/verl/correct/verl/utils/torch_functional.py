"""Stand-in (tests only): verl's masked reductions; imports what verl's does at module level."""

from tensordict import TensorDict  # noqa: F401  (import-only: the adapter stands it in when absent)
from verl.utils.device import get_device_name  # noqa: F401


def masked_sum(values, mask, axis=None):
    return (values * mask).sum(axis) if axis is not None else (values * mask).sum()


def masked_mean(values, mask, axis=None):
    return masked_sum(values, mask, axis) / (mask.sum(axis) if axis is not None else mask.sum()).clamp(min=1)


def expand_as_nested(tensor, nested_tensor):
    """One value per sequence repeated over its tokens, jagged like ``nested_tensor``."""
    import torch

    offsets = nested_tensor.offsets()
    values = torch.repeat_interleave(tensor, offsets.diff(), dim=0)
    return torch.nested.nested_tensor_from_jagged(values=values, offsets=offsets)
