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

import impl.row_stats as row_stats
from harness.cases.case import Case
from harness.checks.invariances import check_chunk_invariance
from harness.checks.parity import check_token_backward, check_token_forward

WIDTHS = (1, 2, 3, 67, 131, 4099)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_row_sums_to_the_same_bits_alone_or_among_others(width):
    generator = torch.Generator().manual_seed(width)
    rows = torch.randn(9, width, generator=generator).exp()
    together = row_stats.row_sum_fixed_order(rows.clone())
    for index in range(rows.shape[0]):
        alone = row_stats.row_sum_fixed_order(rows[index : index + 1].clone())
        assert torch.equal(alone[0], together[index]), f"row {index} of width {width}: {alone[0]} vs {together[index]}"


@pytest.mark.parametrize("width", WIDTHS)
def test_pairwise_error_bound(width):
    """|fl(sum) - sum| <= ceil(log2 n) * eps * sum|x|: the bound of pairwise summation (Higham, ch. 4)."""
    generator = torch.Generator().manual_seed(1000 + width)
    rows = torch.randn(5, width, generator=generator) * 10
    exact = rows.double().sum(dim=1)
    got = row_stats.row_sum_fixed_order(rows.clone()).double()
    bound = max(1, math.ceil(math.log2(width))) * torch.finfo(torch.float32).eps * rows.double().abs().sum(dim=1)
    assert torch.all((got - exact).abs() <= bound), f"width {width}: errors {(got - exact).abs()} vs bound {bound}"


def test_empty_rows_and_zero_width():
    assert row_stats.row_sum_fixed_order(torch.empty(0, 7)).shape == (0,)
    assert torch.equal(row_stats.row_sum_fixed_order(torch.empty(3, 0)), torch.zeros(3))


@pytest.mark.parametrize("vocab", [67, 131])
@pytest.mark.parametrize("chunk_size", [1, 4, 13])
def test_function_on_the_fixed_order_branch_is_chunk_invariant_and_oracle_exact(monkeypatch, vocab, chunk_size):
    """The branch CUDA takes, forced on the CPU, through the suite's own checks.

    One rank (tp=cp=1) runs in this process, so the patched ``row_sum`` is
    the one impl/ uses; ``-inf`` columns check that p log p stays 0, not NaN.
    """
    monkeypatch.setattr(row_stats, "row_sum", row_stats.row_sum_fixed_order)
    case = Case(
        seed=vocab, vocab=vocab, samples=((17, 16), (10, 9)), chunk_size=chunk_size, special=("neg_inf_columns",)
    )
    check_token_forward(case)
    check_token_backward(case)
    check_chunk_invariance(case)
