"""Backward parity: every rank's gradient shard matches the float64 oracle.

The probe loss ``sum a*lp + b*H`` (docs/math.md) with random, non-uniform weights
(zero where masked), fed contiguous or as strided views, and the PPO policy
loss with its entropy bonus; the oracle gradient is float64 autograd on the
unsharded logits, and each TP rank must return its column slice of it.

Tiers (docs/gate.md): finite logits are the contract; special values
(-inf columns, huge offsets, ties) are hardening.
"""

import pytest
from hypothesis import example, given

from harness.cases.case import Case
from harness.cases.strategies import SPECIAL_VALUES, TOKEN_LEVEL, cases
from harness.checks.parity import check_packed_backward, check_token_backward
from harness.checks.policy import check_policy_loss


@pytest.mark.tier("contract")
@given(case=cases(cp_sizes=TOKEN_LEVEL))
@example(case=Case(seed=5, vocab=8, tp=2, samples=((6, 4),), noncontig_grads=True))
def test_token_backward_parity(case, spec):
    check_token_backward(case, spec)


@pytest.mark.tier("hardening")
@given(case=cases(cp_sizes=TOKEN_LEVEL, special=SPECIAL_VALUES))
@example(case=Case(seed=5, vocab=8, tp=2, samples=((6, 4),), special=("neg_inf_columns",), noncontig_grads=True))
def test_token_backward_parity_special_values(case, spec):
    check_token_backward(case, spec)


@pytest.mark.tier("contract")
@given(case=cases())
@example(case=Case(seed=6, vocab=16, tp=4, samples=((5, 3), (4, 2)), chunk_size=1, temperature=0.7))
def test_packed_backward_parity(case, spec):
    check_packed_backward(case, spec)


@pytest.mark.tier("hardening")
@given(case=cases(special=SPECIAL_VALUES))
def test_packed_backward_parity_special_values(case, spec):
    check_packed_backward(case, spec)


@pytest.mark.tier("contract")
@given(case=cases())
@example(case=Case(seed=7, vocab=16, tp=2, samples=((8, 6), (4, 2)), entropy_coef=0.01, mask_mode="mixed"))
@example(case=Case(seed=8, vocab=8, samples=((3, 0),), entropy_coef=0.5))
def test_policy_loss_parity(case, spec):
    check_policy_loss(case, spec)


@pytest.mark.tier("hardening")
@given(case=cases(special=SPECIAL_VALUES))
def test_policy_loss_parity_special_values(case, spec):
    check_policy_loss(case, spec)
