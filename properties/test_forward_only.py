"""Forward-only: every log-prob entry point under ``torch.no_grad()`` on inputs that do not require grad.

How a trainer computes its reference and old-policy log-probs: no error, no
graph, and the grad-enabled call's values bit for bit (``harness/checks/forward_only.py``).
Contract tier: a forward-only path that raises, keeps a graph, or rounds
otherwise is wrong on every training step that uses it. Each example calls
the target twice, so the drawn examples are a quarter of the profile's.
"""

import pytest
from hypothesis import example, given, settings

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.cases.hidden_strategies import hidden_cases
from harness.cases.strategies import TOKEN_LEVEL, cases
from harness.checks.forward_only import check_hidden_forward_only, check_packed_forward_only, check_token_forward_only
from harness.checks.parity import require_rows_within_limits

FEW = settings(max_examples=max(1, settings.default.max_examples // 4))


@pytest.mark.tier("contract")
@FEW
@given(case=cases(cp_sizes=TOKEN_LEVEL))
@example(case=Case(seed=1, vocab=16, tp=2, samples=((9, 4),), chunk_size=3, with_entropy=True, temperature=0.7))
def test_token_forward_only(case, spec):
    check_token_forward_only(case, spec)


@pytest.mark.tier("contract")
@FEW
@given(case=cases())
@example(case=Case(seed=2, vocab=12, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 0)), with_entropy=True))
@example(case=Case(seed=3, vocab=12, tp=2, samples=((7, 3), (4, 2)), chunk_size=2, with_entropy=True))
def test_packed_forward_only(case, spec):
    check_packed_forward_only(case, spec)


@pytest.mark.tier("contract")
@FEW
@given(case=hidden_cases())
@example(case=with_hidden_size(Case(seed=4, vocab=12, tp=2, samples=((9, 4),), chunk_size=3), 6))
def test_hidden_forward_only(case, spec):
    require_rows_within_limits(spec, case)
    check_hidden_forward_only(case, spec)
