"""Float64 references for the hidden-state path (docs/math.md, "Hidden states and a sharded LM head").

``z = h @ W.T`` over the FULL head (never sharded), then the per-token
oracles of ``oracles.token`` unchanged: the hidden-state path has no
quantity of its own, only a matmul in front. Gradients w.r.t. ``h`` and ``W``
come from float64 autograd through that matmul.

``naive_*`` are the plain same-dtype computations the tolerance policy
measures a target against: the matmul in the INPUT dtype (so its own
rounding is part of the yardstick), then ``log_softmax`` in that dtype.
"""

from __future__ import annotations

import torch

from . import token


def logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``z = h @ W.T`` in float64: ``[rows, H] x [V, H] -> [rows, V]``."""
    return hidden.double() @ weight.double().T


def log_probs(hidden, weight, targets, temperature: float = 1.0) -> torch.Tensor:
    return token.log_probs(logits(hidden, weight), targets, temperature)


def entropy(hidden, weight, temperature: float = 1.0) -> torch.Tensor:
    return token.entropy(logits(hidden, weight), temperature)


def naive_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``h @ W.T`` in the inputs' dtype, as an unfused trainer computes its logits."""
    return hidden @ weight.T


def naive_log_probs(hidden, weight, targets, temperature: float = 1.0) -> torch.Tensor:
    return token.naive_log_probs(naive_logits(hidden, weight), targets, temperature)


def naive_entropy(hidden, weight, temperature: float = 1.0) -> torch.Tensor:
    return token.naive_entropy(naive_logits(hidden, weight), temperature)
