"""Stand-in for Megatron-core's utilities: the helpers its cross entropy imports; the rest of the file is never run."""

import torch
import transformer_engine_torch  # noqa: F401  (a CUDA-only import the adapter must not execute)


def ensure_divisibility(numerator, denominator):
    assert numerator % denominator == 0


def divide(numerator, denominator):
    ensure_divisibility(numerator, denominator)
    return numerator // denominator


def get_pg_size(group=None):
    if not torch.distributed.is_initialized() or group is None:
        return 1
    return torch.distributed.get_world_size(group)


def get_pg_rank(group=None):
    if not torch.distributed.is_initialized() or group is None:
        return 0
    return torch.distributed.get_rank(group)
