"""Regression for docs/bugs.md #4: the allgather-CP re-grad (slime review of PR #1788/#2130, fixed by #2123).

The allgather redistribute pads each rank's piece with zeros and sums over CP
ranks with a differentiable all-reduce. Ranks that held none of a sample made
their zeros with ``requires_grad=True``: with the entropy computed under the
no-grad gate (``entropy_coef == 0``) the redistributed entropy was grad-tracked
again, on SOME ranks only, negating the memory saving (and setting up bug 5).

Checked for every CP mode and generated packing: ``requires_grad`` of each
returned tensor equals the gate and is identical on all ranks.

Mutant: ``redistribute_zeros_require_grad``.
"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.cases.strategies import cases
from harness.checks.cp import check_cp_requires_grad

pytestmark = pytest.mark.tier("contract")

CP_CASES = cases(cp_sizes=(2, 4), tp=st.sampled_from((1, 2)), with_entropy=st.just(True))
DSA_TRIGGER = Case(seed=41, vocab=16, cp=2, cp_mode="allgather", samples=((8, 6), (4, 2)), pad_multiple=3)


@given(case=CP_CASES, coef=st.sampled_from((0.0, 0.0, 0.01)))
@example(case=DSA_TRIGGER, coef=0.0)
@example(case=DSA_TRIGGER.with_(cp_mode="zigzag", pad_multiple=1), coef=0.0)
@example(case=Case(seed=42, vocab=8, tp=2, cp=2, cp_mode="allgather", samples=((3, 2), (9, 4))), coef=0.01)
def test_requires_grad_equals_gate_on_every_cp_rank(case, coef, spec):
    check_cp_requires_grad(case.with_(entropy_coef=coef), spec)
