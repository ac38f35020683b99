"""Rank-side job for the hidden-state entry point (``Target.hidden_log_probs``).

Every rank rebuilds the Case's hidden states (replicated) and its own LM-head
shard, calls the TARGET, runs the backward of the row probe loss with the
Case's non-uniform weights, and returns CPU tensors: the outputs, both
gradients, the ``requires_grad`` flags, whether the copies of ``hidden`` and
``weight`` the target was handed (``harness.jobs.inputs``) were left
bit-identical with unchanged version counters (docs/bugs.md #2; read by the
inputs-unmutated check only), and the collective trace (compared across ranks by ``harness.ranks.run``). With
``extra["prefix_rows"]`` other rows precede the Case's in the call
(``harness.cases.hidden.with_prefix``); the returned values and
``grad_hidden`` are the Case's rows only, ``grad_weight`` holds every row's part.
"""

from __future__ import annotations

import torch

from harness.cases.case import Case
from harness.cases.hidden import global_hidden, prefix_rows, probe_weights, rank_weight, with_prefix
from harness.jobs.inputs import Handed, reports_writes
from harness.jobs.logits import _backward, _trace, on_host
from harness.ranks.device import to_device
from harness.targets import load_target


def _grad(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.grad if tensor.grad is not None else torch.zeros_like(tensor)


@on_host
@reports_writes
def hidden_job(payload: dict, ctx) -> dict:
    """Log-probs/entropy of every row from hidden states; backward of the row probe loss."""
    case = Case.from_json(payload["case"])
    target = load_target(payload["spec"])
    a, b = probe_weights(case)
    rows, targets, a, b = with_prefix(case, global_hidden(case), case.row_targets(), a, b)
    hidden = to_device(rows).requires_grad_()
    weight = to_device(rank_weight(case, ctx.tp_rank)).requires_grad_()
    handed = Handed()
    log_probs, entropy = target.hidden_log_probs(
        handed.copy("hidden", hidden),
        handed.copy("weight", weight),
        to_device(targets),
        tp_group=ctx.tp_group,
        chunk_size=case.chunk_size,
        with_entropy=case.with_entropy,
        entropy_grad=payload.get("entropy_grad", True),
        temperature=case.temperature,
    )
    _backward([log_probs, entropy], [a, b], case.noncontig_grads)
    own = slice(prefix_rows(case), None)  # the Case's rows; grad_weight also holds the other rows' part
    return {
        "log_probs": log_probs.detach()[own].clone(),
        "entropy": None if entropy is None else entropy.detach()[own].clone(),
        "log_probs_requires_grad": bool(log_probs.requires_grad),
        "entropy_requires_grad": None if entropy is None else bool(entropy.requires_grad),
        "grad_hidden": _grad(hidden)[own],
        "grad_weight": _grad(weight),
        "trace": _trace(ctx),
        **handed.report(),
    }
