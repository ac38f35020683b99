"""The inputs-unmutated check names an in-place write on the caller's logits as such (check_inputs_unmutated).

On a leaf logits tensor torch refuses the write with its own error before
anything is written, so the write used to surface as that crash, in every
check. Every job now hands the target a fresh copy (an activation, as a
trainer's LM head would, ``harness/jobs/inputs.py``): the value checks are
not red for the write, and the inputs-unmutated check sees the write itself.
"""

from __future__ import annotations

import pytest

from harness.cases.case import Case
from harness.checks.parity import check_inputs_unmutated
from harness.checks.policy import check_policy_loss

WRITER = "tests/fakes/failure_targets.py:InPlaceOnLogits"
CASE = Case(seed=3, vocab=8, samples=((5, 3),), entropy_coef=0.01)


def test_the_value_check_is_not_red_for_the_write():
    check_policy_loss(CASE, WRITER)  # the write lands on the check's own copy: values and gradient are right


def test_the_write_is_reported_as_an_in_place_write():
    with pytest.raises(AssertionError, match="modified the logits' values"):
        check_inputs_unmutated(CASE, WRITER)


def test_a_correct_target_passes():
    check_inputs_unmutated(CASE, "impl")
