"""Stand-in (tests only): verl's masked reductions; imports what verl's does at module level."""

from tensordict import TensorDict  # noqa: F401  (import-only: the adapter stands it in when absent)
from verl.utils.device import get_device_name  # noqa: F401


def masked_sum(values, mask, axis=None):
    return (values * mask).sum(axis) if axis is not None else (values * mask).sum()


def masked_mean(values, mask, axis=None):
    return masked_sum(values, mask, axis) / (mask.sum(axis) if axis is not None else mask.sum()).clamp(min=1)
