"""Donation mode: the gradient written over the logits' own storage (docs/design.md memory bounds).

Same results bit for bit as without donation, or a loud refusal (a second
backward; another node that saved the logits and runs later); never a silent
wrong gradient. Its memory bound is in test_memory_bounds.py.

A response-only (loss-mask-only) case evaluates only its selected rows
(``rows=``) with the gradient donated: the buffer then holds logits in rows
never read, which must come back as 0. The examples below draw that
combination under every profile, the interpreter's six examples included.
"""

import pytest
from hypothesis import example, given

from harness.cases.case import Case
from harness.cases.strategies import TOKEN_LEVEL, cases
from harness.checks.ownership import check_donation

pytestmark = pytest.mark.tier("contract")


@given(case=cases(cp_sizes=TOKEN_LEVEL, max_samples=4, max_length=32))
@example(case=Case(seed=61, vocab=12, tp=2, samples=((9, 4),), chunk_size=2))
@example(case=Case(seed=62, vocab=12, tp=2, samples=((9, 4), (5, 2)), chunk_size=2, response_only=True))
@example(
    case=Case(seed=63, vocab=10, samples=((8, 5), (4, 3)), mask_mode="mixed", response_only=True, loss_mask_only=True)
)
def test_donation_matches_or_refuses(case, spec):
    check_donation(case, spec)
