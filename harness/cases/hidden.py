"""Hidden states and LM-head shards for a Case (the hidden-state entry point).

A token-level Case (cp=1) describes the rows, vocabulary, TP size, dtype,
chunking, temperature and flags; ``extra["hidden_size"]`` adds H. The values
come from the Case's seed on generator streams of their own (so the existing
quantities of a Case never change): ``hidden = randn(rows, H) * scale /
sqrt(H)`` and ``W = randn(V, H)``, so the logits ``h @ W.T`` have about the
Case's ``logit_scale``. Both are rounded to the Case's dtype before anyone
(oracle, naive path, target) sees them. ``extra["same_sign_upstream"]``
makes the probe loss's row weights one sign (``probe_weights``).
"""

from __future__ import annotations

import math

import torch

from harness.cases.case import Case

_STREAM_HIDDEN, _STREAM_HEAD, _STREAM_PREFIX = 50, 51, 52
# ``extra[PREFIX_ROWS]``: rows of other tokens placed BEFORE the Case's rows in the call (topology invariance:
# a row's bits must not depend on its position or on which other rows share the call).
PREFIX_ROWS = "prefix_rows"


def hidden_size(case: Case) -> int:
    size = case.extra.get("hidden_size")
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"a hidden-state Case needs extra={{'hidden_size': H}} with H >= 1, got {case.extra!r}")
    return size


def with_hidden_size(case: Case, size: int) -> Case:
    return case.with_(extra={**case.extra, "hidden_size": int(size)})


def global_hidden(case: Case) -> torch.Tensor:
    """``[rows, H]`` hidden states in the Case's dtype (the same on every TP rank)."""
    size = hidden_size(case)
    values = torch.randn(case.rows, size, generator=case.generator(_STREAM_HIDDEN)) * case.logit_scale
    return (values / math.sqrt(size)).to(case.torch_dtype)


def global_weight(case: Case) -> torch.Tensor:
    """The full ``[V, H]`` LM head in the Case's dtype (what the TP ranks shard by rows)."""
    return torch.randn(case.vocab, hidden_size(case), generator=case.generator(_STREAM_HEAD)).to(case.torch_dtype)


def rank_weight(case: Case, tp_rank: int) -> torch.Tensor:
    """TP rank ``tp_rank``'s head shard ``[V_local, H]``: rows ``[r*V_local, (r+1)*V_local)``."""
    width = case.vocab_local
    return global_weight(case)[tp_rank * width : (tp_rank + 1) * width].contiguous()


def probe_weights(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """The row probe weights ``(a, b)`` of the hidden path's loss ``sum(a*lp + b*H)``.

    ``Case.row_probe_weights``, or their magnitudes with
    ``extra["same_sign_upstream"]``: a trainer's upstream has one sign over
    long stretches of rows (one advantage per response, one entropy
    coefficient), so ``grad(weight) = sum_rows g h`` grows with the row count
    instead of averaging out, which is what makes an accumulation across many
    row blocks in a low-precision dtype lose whole contributions.
    """
    a, b = case.row_probe_weights()
    if case.extra.get("same_sign_upstream"):
        return a.abs(), b.abs()
    return a, b


def prefix_rows(case: Case) -> int:
    """How many other rows precede the Case's rows in the hidden-state call (0: none)."""
    count = case.extra.get(PREFIX_ROWS, 0)
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"extra[{PREFIX_ROWS!r}] must be an int >= 0, got {count!r}")
    return count


def with_prefix(case: Case, hidden: torch.Tensor, targets: torch.Tensor, a: torch.Tensor, b: torch.Tensor):
    """``(hidden, targets, a, b)`` with ``prefix_rows(case)`` rows of other tokens in front (their own stream).

    The Case's own rows keep their values; the others are drawn like them
    (same scale, dtype and vocabulary), so the call differs only in what
    shares it and where the Case's rows sit.
    """
    count = prefix_rows(case)
    if count == 0:
        return hidden, targets, a, b
    g = case.generator(_STREAM_PREFIX)
    size = hidden.shape[1]
    other = (torch.randn(count, size, generator=g) * case.logit_scale / math.sqrt(size)).to(hidden.dtype)
    other_targets = torch.randint(0, case.vocab, (count,), generator=g).to(targets.dtype)
    other_a, other_b = (torch.randn(count, generator=g, dtype=a.dtype) for _ in range(2))
    return (
        torch.cat([other, hidden]),
        torch.cat([other_targets, targets]),
        torch.cat([other_a, a]),
        torch.cat([other_b, b]),
    )
