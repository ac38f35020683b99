"""The fixed-order row sums impl/ uses on every device, and the global tree they form across TP shards.

On CUDA, ``torch.sum`` over a row gives a different last bit depending on how
many rows share the launch (seen on an H100 by ``nox -s gpu``), which broke
chunk invariance there; on the CPU it splits one long reduction across
threads. impl/ therefore sums rows with ``row_sum_fixed_order`` (elementwise
adds only), arranged by ``leaf_blocks`` into one tree over the GLOBAL
vocabulary whose subtrees are the TP shards (docs/topology.md). These tests
pin down what that relies on: a row's sum does not depend on its
neighbours, it is as accurate as pairwise summation promises, a row split
into 2, 4 or 8 shards and summed shard by shard then across ranks gives the
bits of the whole row (TP 8 included, which the rank pool's world of 4
cannot reach), and the Function built on it stays chunk invariant and
oracle-exact.
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


@pytest.mark.parametrize("vocab", [8, 24, 96, 1000, 4096, 152064])
def test_a_row_split_into_tp_shards_sums_to_the_bits_of_the_whole_row(vocab):
    """The shard sums added across ranks (``pairwise_sum``) equal the one-rank sum, at every power-of-two TP."""
    generator = torch.Generator().manual_seed(vocab)
    rows = torch.randn(3, vocab, generator=generator).mul_(4).exp_()
    whole = row_stats.row_sum(rows.clone(), row_stats.leaf_blocks(vocab, 1))
    degrees = [tp for tp in (2, 4, 8) if vocab % tp == 0]
    assert degrees, f"vocab {vocab} splits over no TP degree: the test would compare nothing"
    for tp in degrees:
        width = vocab // tp
        blocks = row_stats.leaf_blocks(width, tp)
        parts = [row_stats.row_sum(rows[:, r * width : (r + 1) * width].clone(), blocks) for r in range(tp)]
        assert torch.equal(row_stats.pairwise_sum(parts), whole), f"vocab {vocab}: tp={tp} differs from tp=1"


@pytest.mark.parametrize(
    ("vocab", "tp", "blocks"),
    [(8, 1, 8), (8, 2, 4), (8, 8, 1), (12, 1, 4), (12, 4, 1), (12, 3, 1), (7, 1, 1), (152064, 1, 64), (128, 128, 1)],
)
def test_leaf_blocks_are_a_power_of_two_dividing_the_vocabulary_and_split_over_the_ranks(vocab, tp, blocks):
    assert row_stats.leaf_blocks(vocab // tp, tp) == blocks


@pytest.mark.parametrize("vocab", [67, 131, 96])
@pytest.mark.parametrize("chunk_size", [1, 4, 13])
def test_function_on_the_fixed_order_sums_is_chunk_invariant_and_oracle_exact(vocab, chunk_size):
    """The row sums every device now uses, through the suite's own checks (one rank, in this process).

    ``-inf`` columns check that p log p stays 0, not NaN; vocab 96 has 32 leaf blocks.
    """
    case = Case(
        seed=vocab, vocab=vocab, samples=((17, 16), (10, 9)), chunk_size=chunk_size, special=("neg_inf_columns",)
    )
    check_token_forward(case)
    check_token_backward(case)
    check_chunk_invariance(case)
