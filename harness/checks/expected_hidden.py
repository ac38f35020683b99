"""Parent-side references for the hidden-state path: float64 oracle and the naive same-dtype path.

The oracle (``precise=True``) runs ``oracles.hidden`` on float64 copies of
the Case's hidden states and FULL head; the naive path (``precise=False``)
does the same computation with plain torch in the Case's dtype (matmul,
``log_softmax``, autograd), the yardstick of the tolerance policy. Both
return the gradients of the row probe loss ``sum(a*lp + b*H)`` w.r.t.
``hidden`` and the full ``weight``, and (oracle only) w.r.t. the logits, whose
magnitude sets the gradient floors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.cases.case import Case
from harness.cases.hidden import global_hidden, global_weight, probe_weights
from oracles import hidden as oracle
from oracles import token


@dataclass
class HiddenReference:
    log_probs: torch.Tensor
    entropy: torch.Tensor | None
    grad_hidden: torch.Tensor
    grad_weight: torch.Tensor
    grad_logits: torch.Tensor | None = None


def _grads(loss: torch.Tensor, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    if not loss.requires_grad:
        return [torch.zeros_like(leaf) for leaf in leaves]
    return list(torch.autograd.grad(loss, leaves))


def _probe(case: Case, log_probs, entropy) -> torch.Tensor:
    a, b = probe_weights(case)
    loss = (a * log_probs.double()).sum()
    return loss + (b * entropy.double()).sum() if entropy is not None else loss


def hidden_reference(case: Case, precise: bool = True) -> HiddenReference:
    hidden, weight = global_hidden(case), global_weight(case)
    if precise:
        hidden, weight = hidden.double(), weight.double()
    hidden, weight = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    targets = case.row_targets()
    if precise:
        log_probs = oracle.log_probs(hidden, weight, targets, case.temperature)
        entropy = oracle.entropy(hidden, weight, case.temperature) if case.with_entropy else None
    else:
        log_probs = oracle.naive_log_probs(hidden, weight, targets, case.temperature)
        entropy = oracle.naive_entropy(hidden, weight, case.temperature) if case.with_entropy else None
    grad_hidden, grad_weight = _grads(_probe(case, log_probs, entropy), [hidden, weight])
    grad_logits = None
    if precise:
        logits = oracle.logits(hidden, weight).detach().requires_grad_()
        lp = token.log_probs(logits, targets, case.temperature)
        ent = token.entropy(logits, case.temperature) if case.with_entropy else None
        (grad_logits,) = _grads(_probe(case, lp, ent), [logits])
    return HiddenReference(
        log_probs.detach().double(),
        None if entropy is None else entropy.detach().double(),
        grad_hidden,
        grad_weight,
        grad_logits,
    )
