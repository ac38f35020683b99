"""Which backend runs the token-level passes over ``[rows, V_local]``: torch or Triton.

``"auto"`` (the default) picks the fused Triton kernels (``impl.triton``)
for CUDA tensors when ``triton`` is importable, and the torch chunk loop of
``impl.token_level`` for everything else (CPU, other devices, no triton).
``use_backend("torch" | "triton" | "auto")`` forces a choice for the calls
made inside it (the harness's ``impl`` and ``impl-triton`` targets do so);
the choice is made once per forward and kept for its backward.

Triton runs CPU tensors only under its interpreter (``TRITON_INTERPRET=1``,
read when the kernels are defined, i.e. when ``impl.triton.kernels`` is first
imported): that is how the Triton backend is checked on a machine without a
GPU. Forcing ``"triton"`` on CPU tensors without it is a clear error, never a
silent fallback (fake tensors excepted: they only reach the kernels' fake
implementations, which is how the memory checks measure this backend).
``triton`` is imported lazily: it is an optional dependency (``pip install
logprob-harness[triton]``) and costs about a second to import. Only
``impl.triton.env`` (which imports no Triton) is imported here; the kernels
and their launches (``impl.triton.launch``) are imported on first use.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch
from torch._subclasses.fake_tensor import is_fake

# Also this module's answers to "is triton installed / interpreting?" (the harness and benches import them here).
from .triton.env import interpreting, triton_available

TORCH, TRITON, AUTO = "torch", "triton", "auto"
BACKENDS = (AUTO, TORCH, TRITON)

_REQUESTED = contextvars.ContextVar("lph_impl_backend", default=AUTO)


@contextlib.contextmanager
def use_backend(name: str):
    """Run the token-level calls inside this block on backend ``name`` (``auto``, ``torch`` or ``triton``)."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    token = _REQUESTED.set(name)
    try:
        yield
    finally:
        _REQUESTED.reset(token)


def resolve_backend(logits: torch.Tensor) -> str:
    """``"torch"`` or ``"triton"`` for this call (see the module docstring); ValueError if the forced one cannot run."""
    requested = _REQUESTED.get()
    if requested == TORCH:
        return TORCH
    on_cuda = logits.device.type == "cuda"
    if requested == AUTO:
        return TRITON if on_cuda and triton_available() else TORCH
    if not triton_available():
        raise ValueError("backend 'triton' was forced but triton is not installed: pip install 'triton>=3.2'")
    if not on_cuda and not (logits.device.type == "cpu" and (interpreting() or is_fake(logits))):
        raise ValueError(
            f"backend 'triton' was forced for {logits.device.type} tensors: Triton runs CUDA tensors, or CPU tensors "
            "under its interpreter (set TRITON_INTERPRET=1 before impl.triton.kernels is imported)"
        )
    return TRITON


def triton_backend():
    """The Triton backend's launches (``impl.triton.launch``), imported on first use (an optional dependency)."""
    from .triton import launch

    return launch
