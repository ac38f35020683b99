"""GPU-only entries of ``bench.gpu_bench`` beside ``bench.implementations``: each ``run(logits, targets)``.

* ``impl`` / ``impl-donate`` pinned to the torch backend (on CUDA ``impl``'s
  default would now pick the Triton kernels), so the table keeps its
  before-and-after reading;
* ``impl-triton`` / ``impl-triton-donate``: the fused kernels (``impl.triton_backend``);
* ``torch.compile(naive)``: torch's own fused Triton output for the naive code;
* ``liger``: Liger-Kernel's fused cross entropy (``reduction="none"``: the
  per-token ``-log p_t``; it computes no entropy, so it does less work than
  the others), when ``liger_kernel`` is installed.

An entry that cannot be built is left out with its reason, printed and
written to the report: never a silent gap in the table.
"""

from __future__ import annotations

import importlib.util

import torch

from bench.implementations import naive
from impl.backend import TORCH, TRITON, triton_available, use_backend
from impl.token_level import log_probs_and_entropy

CHUNK = 1024  # the torch backend's reference chunk on a GPU (bench.gpu_bench); the kernels ignore it


def on_backend(backend: str, donate: bool = False):
    def run(logits, targets):
        with use_backend(backend):
            return log_probs_and_entropy(logits, targets, chunk_size=CHUNK, donate_logits=donate)

    return run


def compiled_naive():
    return torch.compile(naive, dynamic=False)


def liger():
    """Liger-Kernel's cross-entropy Function, per token, or the reason it is left out."""
    if importlib.util.find_spec("liger_kernel") is None:
        return "liger_kernel is not installed (pip install liger-kernel)"
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    except ImportError as exc:
        return f"liger_kernel has no LigerCrossEntropyFunction here: {exc}"

    def run(logits, targets):
        loss = LigerCrossEntropyFunction.apply(logits, targets, None, -100, 0.0, 0.0, "none")
        loss = loss[0] if isinstance(loss, tuple) else loss
        return -loss, None

    return run


def gpu_implementations(runs: dict) -> tuple[dict, dict]:
    """``runs`` with impl pinned to torch, plus the GPU peers; and {name: reason} for those left out."""
    runs = dict(runs)
    left_out = {}
    runs["impl"], runs["impl-donate"] = on_backend(TORCH), on_backend(TORCH, donate=True)
    if triton_available():
        runs["impl-triton"], runs["impl-triton-donate"] = on_backend(TRITON), on_backend(TRITON, donate=True)
    else:
        left_out["impl-triton"] = "triton is not installed"
    runs["torch.compile(naive)"] = compiled_naive()
    peer = liger()
    if isinstance(peer, str):
        left_out["liger"] = peer
    else:
        runs["liger"] = peer
    return runs, left_out
