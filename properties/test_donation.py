"""Donation mode: the gradient written over the logits' own storage (docs/design.md memory bounds).

Same results bit for bit as without donation, or a loud refusal (a second
backward; another node that saved the logits and runs later); never a silent
wrong gradient. Its memory bound is in test_memory_bounds.py.
"""

import pytest
from hypothesis import example, given

from harness.cases.case import Case
from harness.cases.strategies import TOKEN_LEVEL, cases
from harness.checks.ownership import check_donation

pytestmark = pytest.mark.tier("contract")


@given(case=cases(cp_sizes=TOKEN_LEVEL, max_samples=4, max_length=32))
@example(case=Case(seed=61, vocab=12, tp=2, samples=((9, 4),), chunk_size=2))
def test_donation_matches_or_refuses(case, spec):
    check_donation(case, spec)
