"""Invariances: chunking, the entropy gate and response-only evaluation change nothing.

* chunking never changes a row's arithmetic (packed path and token level);
* entropy values do not depend on whether their gradient is kept (the gate);
* response-only and loss-mask-only evaluation equal the full path on every
  consumed position, read 0 elsewhere, and give the same gradient (slime #2076).

Tiers (docs/gate.md): the contract is the same values within the tolerance
policy, bit for bit for a target declaring ``bit_exact`` (impl does); the
``_bit_for_bit`` twins demand bit-identity of every target and are
hardening (determinism), drawing special values too.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.cases.strategies import ANY_VALUES, TOKEN_LEVEL, cases
from harness.checks.invariances import (
    check_chunk_invariance,
    check_gate_invariance,
    check_response_only,
    check_token_chunk_invariance,
    check_token_gate_invariance,
)

CHUNKS = st.integers(1, 9)


@pytest.mark.tier("contract")
@given(case=cases(), chunk_size=CHUNKS)
def test_chunk_invariance(case, chunk_size, spec):
    check_chunk_invariance(case.with_(chunk_size=chunk_size), spec)


@pytest.mark.tier("hardening")
@given(case=cases(special=ANY_VALUES), chunk_size=CHUNKS)
def test_chunk_invariance_bit_for_bit(case, chunk_size, spec):
    check_chunk_invariance(case.with_(chunk_size=chunk_size), spec, exact=True)


@pytest.mark.tier("contract")
@given(case=cases(cp_sizes=TOKEN_LEVEL), chunk_size=CHUNKS)
def test_token_chunk_invariance(case, chunk_size, spec):
    check_token_chunk_invariance(case.with_(chunk_size=chunk_size), spec)


@pytest.mark.tier("hardening")
@given(case=cases(cp_sizes=TOKEN_LEVEL, special=ANY_VALUES), chunk_size=CHUNKS)
def test_token_chunk_invariance_bit_for_bit(case, chunk_size, spec):
    check_token_chunk_invariance(case.with_(chunk_size=chunk_size), spec, exact=True)


@pytest.mark.tier("contract")
@given(case=cases(with_entropy=st.just(True)))
def test_gate_invariance(case, spec):
    check_gate_invariance(case, spec)


@pytest.mark.tier("hardening")
@given(case=cases(with_entropy=st.just(True), special=ANY_VALUES))
def test_gate_invariance_bit_for_bit(case, spec):
    check_gate_invariance(case, spec, exact=True)


@pytest.mark.tier("contract")
@given(case=cases(cp_sizes=TOKEN_LEVEL, with_entropy=st.just(True)))
def test_token_gate_invariance(case, spec):
    check_token_gate_invariance(case, spec)


@pytest.mark.tier("hardening")
@given(case=cases(cp_sizes=TOKEN_LEVEL, with_entropy=st.just(True), special=ANY_VALUES))
def test_token_gate_invariance_bit_for_bit(case, spec):
    check_token_gate_invariance(case, spec, exact=True)


@pytest.mark.tier("contract")
@given(case=cases(response_only=st.just(True)))
def test_response_only_matches_full_path(case, spec):
    check_response_only(case, spec)


@pytest.mark.tier("hardening")
@given(case=cases(response_only=st.just(True), special=ANY_VALUES))
def test_response_only_matches_full_path_bit_for_bit(case, spec):
    check_response_only(case, spec, exact=True)
