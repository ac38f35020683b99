"""Self-tests of the tolerance policy: it passes honest results and catches real errors."""

import math

import pytest
import torch

from harness.checks.tolerance import assert_identical, compare


def test_error_within_naive_error_passes_and_beyond_fails():
    ref = torch.linspace(-3, 0, 50, dtype=torch.float64)
    naive = ref + 1e-3
    assert compare(ref + 1e-3, ref, naive, what="x", scale=1.0).ok
    assert not compare(ref + 1e-2, ref, naive, what="x", scale=1.0).ok


def test_floor_is_rounding_sized_when_naive_is_exact():
    ref = torch.linspace(-3, 0, 50, dtype=torch.float64)
    assert compare(ref.float(), ref, ref, what="x", scale=4.0).ok
    assert not compare(ref + 1e-4, ref, ref, what="x", scale=4.0).ok


def test_nan_and_mismatched_infinities_fail():
    ref = torch.tensor([0.0, -math.inf], dtype=torch.float64)
    assert compare(torch.tensor([0.0, -math.inf]), ref, ref, what="x", scale=1.0).ok
    assert not compare(torch.tensor([math.nan, -math.inf]), ref, ref, what="x", scale=1.0).ok
    assert not compare(torch.tensor([0.0, -1e30]), ref, ref, what="x", scale=1.0).ok


def test_overflowed_naive_gives_no_free_pass():
    ref = torch.zeros(3, dtype=torch.float64)
    naive = torch.full((3,), math.nan)
    assert not compare(torch.full((3,), 1e-3), ref, naive, what="x", scale=1.0).ok


def test_shape_mismatch_fails():
    assert not compare(torch.zeros(2), torch.zeros(3, dtype=torch.float64), torch.zeros(3), what="x", scale=1).ok


def test_assert_identical_reports_first_difference():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert_identical(a, a.clone(), what="same")
    with pytest.raises(AssertionError, match="flat index 1"):
        assert_identical(a, torch.tensor([1.0, 2.5, 3.0]), what="diff")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_hidden_logit_rounding_bounds_the_error_of_rounding_the_logits_once(dtype):
    """The hidden path's extra term is a true bound: log-probs and entropy of the logits rounded once to the
    input dtype (computed exactly otherwise) stay within it; fp32 inputs get none (the fp32 floor covers it)."""
    from harness.checks.tolerance import hidden_logit_rounding

    generator = torch.Generator().manual_seed(7)
    for _ in range(20):
        hidden = (torch.randn(5, 16, generator=generator) * 2).to(dtype)
        weight = (torch.randn(40, 16, generator=generator) * 0.5).to(dtype)
        exact = hidden.double() @ weight.double().T
        rounded = exact.to(dtype).double()
        bound_lp, bound_h = hidden_logit_rounding(hidden, weight, 1.0)
        lp_exact, lp_rounded = torch.log_softmax(exact, -1), torch.log_softmax(rounded, -1)
        assert float((lp_rounded - lp_exact).abs().max()) <= bound_lp
        entropy = lambda lp: -(lp.exp() * lp).sum(-1)  # noqa: E731
        assert float((entropy(lp_rounded) - entropy(lp_exact)).abs().max()) <= bound_h
    assert hidden_logit_rounding(hidden.float(), weight.float(), 1.0) == (0.0, 0.0)
