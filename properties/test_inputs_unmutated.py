"""The logits are never written: bit-identical values and an unchanged version counter.

Checked on the trainer-facing path with the entropy gradient ON (the
configuration in which SkyRL's borrow-then-restore backward ran), after the
forward AND the backward, on every rank. The parity properties assert the same
on their paths; this one makes it the property under test.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.cases.strategies import cases
from harness.checks.parity import check_inputs_unmutated

pytestmark = pytest.mark.tier("contract")


@given(case=cases(with_entropy=st.just(True)), coef=st.sampled_from((0.01, -1.0)))
def test_logits_unmutated_after_forward_and_backward(case, coef, spec):
    check_inputs_unmutated(case.with_(entropy_coef=coef), spec)
