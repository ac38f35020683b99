"""Self-tests of the tolerance policy: it passes honest results and catches real errors."""

import ast
import math
from pathlib import Path

import pytest
import torch

from harness.checks import failure, judge
from harness.checks.failure import CheckFailure
from harness.checks.tolerance import PrecisionOnly, assert_identical, compare


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


# ---- one judge for every entry point (harness/checks/judge.py) -----------------------------------------

CHECKS_DIR = Path(__file__).resolve().parents[1] / "harness" / "checks"
JUDGED_ONLY_THROUGH_THE_JUDGE = ("assert_close", "compare", "assert_identical")


def test_every_check_compares_through_the_one_judge():
    """No check module calls the tolerance helpers itself: a new entry point cannot leave the working-dtype
    classification out (the sampling and token-level policy checks once did)."""
    offenders = []
    for path in sorted(CHECKS_DIR.glob("*.py")):
        if path.name in ("tolerance.py", "judge.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "harness.checks.tolerance":
                offenders += [f"{path.name}: {a.name}" for a in node.names if a.name in JUDGED_ONLY_THROUGH_THE_JUDGE]
            if isinstance(node, ast.Attribute) and node.attr in JUDGED_ONLY_THROUGH_THE_JUDGE:
                if isinstance(node.value, ast.Name) and node.value.id == "tolerance":
                    offenders.append(f"{path.name}: tolerance.{node.attr}")
    assert not offenders, offenders


def test_the_judges_classify_rounding_in_the_working_dtype():
    ref = torch.full((4,), -9.0, dtype=torch.float64)
    rounded = ref + 0.05  # within two bf16 units at magnitude 9, far over an fp32 bound
    with pytest.raises(PrecisionOnly):
        judge.value(rounded, ref, ref, what="x", scale=1.0, working_dtype=torch.bfloat16)
    with pytest.raises(CheckFailure) as info:
        judge.value(rounded, ref, ref, what="x", scale=1.0, working_dtype=torch.float32)
    assert not isinstance(info.value, PrecisionOnly) and failure.facts_of(info.value).kind == failure.VALUE
    with pytest.raises(CheckFailure) as info:
        judge.gradient(rounded, ref, ref, what="g", scale=1.0, working_dtype=torch.float32)
    assert failure.facts_of(info.value).kind == failure.GRADIENT
    assert failure.facts_of(info.value).figures["reference"] == 9.0  # the yardstick of the magnitude class
