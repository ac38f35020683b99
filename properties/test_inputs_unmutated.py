"""The inputs are never written: bit-identical values and an unchanged version counter, at every entry point.

The target is handed a fresh copy of what the caller owns (the logits, the
hidden states and head shard, the kept set, the token-level matrices:
``harness/jobs/inputs.py``), so no other check is red for a write; these
are the checks that report one. Checked after the forward AND the backward,
on every rank; on the trainer-facing policy path with the entropy gradient
ON (the configuration in which SkyRL's borrow-then-restore backward ran).
The hidden-state entry point's twin is ``test_hidden_inputs_unmutated``
(``properties/test_hidden_states.py``).

Writes are a property of a code path, not of the values, so each entry point
runs an eighth of the profile's examples (10 in ``ci``) besides its pinned one.
"""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.cases.policy_strategies import policy_cases
from harness.cases.sampling import sampling_case, sampling_cases
from harness.cases.strategies import TOKEN_LEVEL, cases
from harness.checks.parity import check_inputs_unmutated
from harness.checks.sampling import check_sampling_inputs_unmutated
from harness.checks.token_policy import check_token_policy_inputs_unmutated

pytestmark = pytest.mark.tier("contract")
FEW = settings(max_examples=max(1, settings.default.max_examples // 8))
BASE = Case(seed=11, vocab=16, tp=2, samples=((6, 4), (5, 2)), chunk_size=2, entropy_coef=0.01)


@given(case=cases(with_entropy=st.just(True)), coef=st.sampled_from((0.01, -1.0)))
def test_logits_unmutated_after_forward_and_backward(case, coef, spec):
    check_inputs_unmutated(case.with_(entropy_coef=coef), spec)


@FEW
@given(case=cases(cp_sizes=TOKEN_LEVEL))
@example(case=BASE)
def test_token_logits_unmutated(case, spec):
    check_inputs_unmutated(case, spec, level="token")


@FEW
@given(case=cases())
@example(case=BASE.with_(cp=2, tp=1, cp_mode="zigzag"))
def test_packed_logits_unmutated(case, spec):
    check_inputs_unmutated(case, spec, level="packed")


@FEW
@given(case=sampling_cases(cases(cp_sizes=TOKEN_LEVEL, max_samples=3, max_length=16, max_vocab_local=48)))
@example(case=sampling_case(BASE, kept="random", form="dense"))
def test_sampling_inputs_unmutated(case, spec):
    check_sampling_inputs_unmutated(case, spec)


@FEW
@given(case=policy_cases(tp=st.just(1), cp_sizes=(1,)))
@example(case=BASE.with_(tp=1))
def test_token_policy_inputs_unmutated(case, spec):
    check_token_policy_inputs_unmutated(case, spec)
