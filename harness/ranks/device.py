"""Where rank-local tensors live: the one place the harness reads ``LPH_DEVICE``.

``LPH_DEVICE=cpu`` (the default) changes nothing: every tensor stays where
the Case built it and the rank pool uses gloo. ``LPH_DEVICE=cuda`` (set by
``nox -s gpu``) puts each rank's inputs on its GPU:

* the Case still draws every value on the CPU (``torch.Generator``), so the
  float64 oracle, which stays on the CPU, and the ranks see the same bits;
  the jobs copy their rank-local tensors to ``current()`` (``to_device``);
* results cross back to the parent as CPU tensors (``to_host``), so the
  tolerance policy and the bit-for-bit checks compare CPU tensors as before;
* the pool picks its backend with ``backend_for``: with at least one GPU per
  rank, NCCL for CUDA tensors (one process per GPU, ``rank % device_count``),
  with gloo kept for the CPU tensors some collectives carry (the harness's own
  self-test jobs, host-side metadata); with fewer GPUs than ranks, gloo alone
  with CUDA tensors on the shared device(s), so the multi-rank properties
  still run on a single GPU.

Fake tensors (the memory tracker) are never affected: they must stay on the
CPU, a fake CUDA tensor aborts the CPU build of torch.
"""

from __future__ import annotations

import os

import torch

ENV_VAR = "LPH_DEVICE"
DEVICE_TYPES = ("cpu", "cuda")
# NCCL for CUDA tensors, gloo for CPU tensors on the same process group.
NCCL_WITH_CPU_FALLBACK = "cpu:gloo,cuda:nccl"


def device_type() -> str:
    """``cpu`` or ``cuda``, from ``LPH_DEVICE`` (default ``cpu``); anything else is an error naming the variable."""
    value = os.environ.get(ENV_VAR, "").strip().lower() or "cpu"
    if value not in DEVICE_TYPES:
        raise ValueError(f"{ENV_VAR}={value!r}: choose one of {DEVICE_TYPES}")
    return value


def backend_for(world_size: int, kind: str, device_count: int) -> str:
    """The process-group backend for ``world_size`` ranks on ``kind`` tensors with ``device_count`` GPUs visible.

    Pure function of its arguments, so it is unit-tested without a GPU.
    """
    if kind == "cpu":
        return "gloo"
    if device_count < 1:
        raise RuntimeError(f"{ENV_VAR}=cuda but torch sees no CUDA device (torch {torch.__version__})")
    if device_count >= world_size:
        return NCCL_WITH_CPU_FALLBACK  # one process per GPU
    return "gloo"  # ranks share a GPU: NCCL refuses two ranks on one device, gloo moves CUDA tensors itself


def device_index(rank: int, device_count: int) -> int:
    """The GPU of ``rank``: its own with one GPU per rank, else ranks share the devices round-robin."""
    return rank % device_count


def setup_rank(rank: int, world_size: int) -> str:
    """Pin this rank process to its GPU (under ``LPH_DEVICE=cuda``) and return the backend to initialise with."""
    kind = device_type()
    if kind == "cpu":
        return backend_for(world_size, kind, 0)
    count = torch.cuda.device_count()
    backend = backend_for(world_size, kind, count)
    torch.cuda.set_device(device_index(rank, count))
    return backend


def current() -> torch.device:
    """This process's device for rank-local tensors (the GPU ``setup_rank`` pinned, or the CPU)."""
    if device_type() == "cpu":
        return torch.device("cpu")
    reason = no_cuda_reason()
    if reason is not None:
        raise RuntimeError(f"{ENV_VAR}=cuda but {reason}; unset {ENV_VAR} to run on the CPU")
    return torch.device("cuda", torch.cuda.current_device())


def to_device(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on ``current()``: the same object on the CPU (no copy), a copy of the same bits on a GPU."""
    return tensor.to(current())


def to_host(value):
    """``value`` with every non-CPU tensor inside dicts, lists and tuples copied to the CPU; CPU tensors untouched."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else value.detach().cpu()
    if isinstance(value, dict):
        return {key: to_host(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_host(item) for item in value]
    if isinstance(value, tuple):
        items = [to_host(item) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def no_cuda_reason() -> str | None:
    """Why CUDA work must be skipped here (``None`` when a CUDA device is usable)."""
    if torch.cuda.is_available():
        return None
    return f"no CUDA device (torch {torch.__version__}, cuda {torch.version.cuda})"
