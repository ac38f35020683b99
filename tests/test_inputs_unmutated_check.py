"""The inputs-unmutated check names an in-place write on the caller's logits as such (check_inputs_unmutated).

On a leaf logits tensor torch refuses the write with its own error before
anything is written, so the write used to surface as that crash; the check
now hands the target an activation (as a trainer's LM head would) and sees
the write itself.
"""

from __future__ import annotations

import pytest

from harness.cases.case import Case
from harness.checks.parity import check_inputs_unmutated
from harness.jobs.logits import policy_job
from harness.ranks.run import run_job

WRITER = "tests/fakes/failure_targets.py:InPlaceOnLogits"
CASE = Case(seed=3, vocab=8, samples=((5, 3),), entropy_coef=0.01)


def test_on_a_leaf_torch_raises_its_own_error_first():
    with pytest.raises(RuntimeError, match="leaf Variable"):
        run_job(policy_job, CASE, WRITER)


def test_the_write_is_reported_as_an_in_place_write():
    with pytest.raises(AssertionError, match="modified the logits' values"):
        check_inputs_unmutated(CASE, WRITER)


def test_a_correct_target_passes():
    check_inputs_unmutated(CASE, "impl")
