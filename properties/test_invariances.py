"""Invariances that hold bit for bit (DESIGN.md, tolerance: exact where the math promises it).

* chunking never changes a row's arithmetic;
* entropy values do not depend on whether their gradient is kept (the gate);
* response-only and loss-mask-only evaluation equal the full path on every
  consumed position, read 0 elsewhere, and give the same gradient (slime #2076).
"""

from hypothesis import given
from hypothesis import strategies as st

from harness.checks import check_chunk_invariance, check_gate_invariance, check_response_only
from properties.strategies import cases


@given(case=cases(), chunk_size=st.integers(1, 9))
def test_chunk_invariance(case, chunk_size, target):
    check_chunk_invariance(case.with_(chunk_size=chunk_size), target)


@given(case=cases(with_entropy=st.just(True)))
def test_gate_invariance(case, target):
    check_gate_invariance(case, target)


@given(case=cases(response_only=st.just(True)))
def test_response_only_matches_full_path(case, target):
    check_response_only(case, target)
