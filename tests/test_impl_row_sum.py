"""The fixed-order row sum impl/ uses off the CPU, exercised on the CPU.

On CUDA, ``torch.sum`` over a row gives a different last bit depending on how
many rows share the launch (seen on an H100 by ``nox -s gpu``), which broke
chunk invariance there. impl/ therefore sums rows off the CPU with
``row_sum_fixed_order``. The CPU suite cannot see CUDA kernels, so these
tests pin down what the fix relies on, on any device: a row's sum does not
depend on its neighbours, it is as accurate as pairwise summation promises,
and the whole Function built on it stays chunk invariant and oracle-exact.
"""

from __future__ import annotations

import math

import pytest
import torch

import impl.token_level as token_level
from harness.tolerance import compare, gradient_scale, value_scale
from oracles import token

WIDTHS = (1, 2, 3, 67, 131, 4099)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_row_sums_to_the_same_bits_alone_or_among_others(width):
    generator = torch.Generator().manual_seed(width)
    rows = torch.randn(9, width, generator=generator).exp()
    together = token_level.row_sum_fixed_order(rows.clone())
    for index in range(rows.shape[0]):
        alone = token_level.row_sum_fixed_order(rows[index : index + 1].clone())
        assert torch.equal(alone[0], together[index]), f"row {index} of width {width}: {alone[0]} vs {together[index]}"


@pytest.mark.parametrize("width", WIDTHS)
def test_pairwise_error_bound(width):
    """|fl(sum) - sum| <= ceil(log2 n) * eps * sum|x|: the bound of pairwise summation (Higham, ch. 4)."""
    generator = torch.Generator().manual_seed(1000 + width)
    rows = torch.randn(5, width, generator=generator) * 10
    exact = rows.double().sum(dim=1)
    got = token_level.row_sum_fixed_order(rows.clone()).double()
    bound = max(1, math.ceil(math.log2(width))) * torch.finfo(torch.float32).eps * rows.double().abs().sum(dim=1)
    assert torch.all((got - exact).abs() <= bound), f"width {width}: errors {(got - exact).abs()} vs bound {bound}"


def test_empty_rows_and_zero_width():
    assert token_level.row_sum_fixed_order(torch.empty(0, 7)).shape == (0,)
    assert torch.equal(token_level.row_sum_fixed_order(torch.empty(3, 0)), torch.zeros(3))


def _run(logits, targets, chunk_size):
    leaf = logits.clone().requires_grad_()
    log_probs, entropy = token_level.log_probs_and_entropy(leaf, targets, chunk_size=chunk_size, with_entropy=True)
    (log_probs.sum() + entropy.sum()).backward()
    return log_probs.detach(), entropy.detach(), leaf.grad


@pytest.mark.parametrize("vocab", [67, 131])
def test_function_on_the_fixed_order_branch_is_chunk_invariant_and_oracle_exact(monkeypatch, vocab):
    """The branch CUDA takes, forced on the CPU: same bits at every chunk size, within the tolerance policy."""
    monkeypatch.setattr(token_level, "_row_sum", token_level.row_sum_fixed_order)
    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randn(27, vocab, generator=generator) * 3
    logits[:, 5] = -math.inf  # a masked vocabulary column: p log p must stay 0, never NaN
    targets = torch.randint(6, vocab, (27,), generator=generator)

    one_chunk = _run(logits, targets, None)
    for chunk_size in (1, 4, 13):
        chunked = _run(logits, targets, chunk_size)
        for name, a, b in zip(("log_probs", "entropy", "grad"), chunked, one_chunk, strict=True):
            assert torch.equal(a, b), f"{name}: chunk_size={chunk_size} vs one chunk differ"

    precise = logits.double().requires_grad_()
    ref_lp, ref_ent = token.log_probs(precise, targets), token.entropy(precise)
    (ref_lp.sum() + ref_ent.sum()).backward()
    naive = logits.clone().requires_grad_()
    naive_lp, naive_ent = token.naive_log_probs(naive, targets), token.naive_entropy(naive)
    (naive_lp.sum() + naive_ent.sum()).backward()
    scale = value_scale(logits, 1.0)
    checks = [
        compare(one_chunk[0], ref_lp.detach(), naive_lp.detach(), what="log_probs", scale=scale),
        compare(one_chunk[1], ref_ent.detach(), naive_ent.detach(), what="entropy", scale=scale),
        compare(one_chunk[2], precise.grad, naive.grad, what="grad", scale=gradient_scale(logits, 1.0, 2.0)),
    ]
    assert all(check.ok for check in checks), "\n".join(map(str, checks))
