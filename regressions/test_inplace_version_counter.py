"""Regression for docs/bugs.md #2: in-place writes on saved logits (SkyRL #1648/#1650, verl #1672).

SkyRL's old ``_VocabParallelEntropy.backward`` subtracted from the logits it
had saved and added the amount back ("borrow then restore"). Any other node
that saved the same storage then failed with "one of the variables needed
for gradient computation has been modified by an inplace operation", and in
fp32 ``(z - c) + c != z`` silently perturbed the logits. Megatron's fused
cross-entropy writes over its input likewise, which is why verl computed a
wrong entropy after calling it.

Three named checks: one backward through several consumers of the same
logits (the bug as it shipped); the same graph retained and backpropagated a
second time (docs/bugs.md: "a second backward with retain_graph=True still
correct", which fails if a backward overwrites the tensors its own node
saved, even when no other node shares them); and the policy path leaving its
logits untouched.

Mutants: ``borrow_restore_saved_logits`` (the SkyRL backward) and
``forward_shifts_logits_in_place`` (a forward that skips its private copy).
"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.cases.strategies import TOKEN_LEVEL, cases
from harness.checks.ownership import check_second_backward, check_shared_logits
from harness.checks.parity import check_inputs_unmutated

pytestmark = pytest.mark.tier("contract")

# At least two rows, so that logits[1:] overlaps logits. fp32 and no special
# values (-inf columns, ties): the mechanism does not depend on them, and an
# upstream entropy that loses precision in bf16 or turns -inf columns into NaN
# must fail the forward-parity properties for that, not this regression.
MULTI_ROW = cases(
    cp_sizes=TOKEN_LEVEL, max_samples=4, max_length=24, dtype=st.just("float32"), special=st.just([])
).filter(lambda case: case.rows >= 2)


@given(case=MULTI_ROW)
@example(case=Case(seed=31, vocab=70, samples=((8, 5),), chunk_size=3))
@example(case=Case(seed=32, vocab=16, tp=2, samples=((6, 3), (5, 2)), chunk_size=2, logit_scale=30.0))
@example(case=Case(seed=33, vocab=8, tp=4, samples=((4, 3),), chunk_size=1))
def test_shared_logits_and_overlapping_views_in_one_backward(case, spec):
    check_shared_logits(case, spec)


@given(case=MULTI_ROW)
@example(case=Case(seed=31, vocab=70, samples=((8, 5),), chunk_size=3))
@example(case=Case(seed=33, vocab=8, tp=4, samples=((4, 3),), chunk_size=1))
def test_second_backward_through_retained_graph(case, spec):
    check_second_backward(case, spec)


@given(case=cases(with_entropy=st.just(True)), coef=st.sampled_from((0.01, 1.0)))
@example(case=Case(seed=34, vocab=16, tp=2, samples=((7, 4),), chunk_size=2), coef=0.01)
def test_policy_path_leaves_logits_untouched(case, coef, spec):
    check_inputs_unmutated(case.with_(entropy_coef=coef, with_entropy=True), spec)
