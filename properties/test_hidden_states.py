"""The hidden-state entry point (docs/math.md, "Hidden states and a sharded LM head") against the float64 oracle.

``hidden [rows, H]`` and this rank's LM-head shard ``[V_local, H]`` in, log-probs
and entropy out, gradients into both. Through the rank pool, tp 1/2/4:

* forward parity (log-probs, entropy) and backward parity (grad(hidden)
  summed over TP, each rank's grad(weight) shard), under the tolerance
  policy extended by the matmul's own error;
* chunk invariance and entropy-gate invariance: within the tolerance policy
  (contract), bit for bit where the target declares ``bit_exact`` and in the
  ``_bit_for_bit`` variants (hardening);
* hidden and weight never written (values and version counters);
* TP ranks return identical replicated outputs and issue the same collectives;
* grad(weight) over a thousand row blocks in bf16/fp16 (``many_block_cases``):
  its per-block contributions must not be accumulated in the input dtype.
  At seconds per example it draws a twentieth of the profile's examples (the
  ci profile: 4), beside an explicit bf16 example for every profile. A
  target whose path costs milliseconds per row on this machine declares
  ``max_hidden_rows`` (``harness.cases.limits``) and these examples read
  UNSUPPORTED with the bound named.
"""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.cases.hidden_strategies import MANY_BLOCKS, hidden_cases, many_block_cases
from harness.checks.hidden import (
    check_hidden_backward,
    check_hidden_chunk_invariance,
    check_hidden_forward,
    check_hidden_gate_invariance,
    check_hidden_inputs_unmutated,
    check_hidden_tp_consistency,
)
from harness.checks.parity import require_rows_within_limits

QWEN_V = 151936


@pytest.mark.tier("contract")
@given(case=hidden_cases())
@example(case=with_hidden_size(Case(seed=2, vocab=QWEN_V, tp=4, samples=((3, 1),), dtype="bfloat16"), 16))
def test_hidden_forward_parity(case, spec):
    check_hidden_forward(case, spec)


@pytest.mark.tier("contract")
@given(case=hidden_cases())
@example(case=with_hidden_size(Case(seed=5, vocab=12, tp=2, samples=((300, 5), (9, 2)), chunk_size=7), 8))
def test_hidden_backward_parity(case, spec):
    check_hidden_backward(case, spec)


@pytest.mark.tier("contract")
@settings(max_examples=max(1, settings.default.max_examples // 20))
@given(case=many_block_cases())
@example(
    case=with_hidden_size(
        Case(
            seed=3,
            vocab=4,
            tp=2,
            samples=((MANY_BLOCKS * 256 + 17, 3),),
            dtype="bfloat16",
            extra={"same_sign_upstream": True},
        ),
        2,
    )
)
def test_hidden_weight_grad_many_blocks(case, spec):
    require_rows_within_limits(spec, case)
    check_hidden_backward(case, spec)


@pytest.mark.tier("contract")
@given(case=hidden_cases(), chunk_size=st.sampled_from((1, 9, 256, 300, 513)))
@example(case=with_hidden_size(Case(seed=6, vocab=8, tp=2, samples=((520, 3),)), 5), chunk_size=1)
def test_hidden_chunk_invariance(case, chunk_size, spec):
    check_hidden_chunk_invariance(case.with_(chunk_size=chunk_size), spec)


@pytest.mark.tier("hardening")
@given(case=hidden_cases(), chunk_size=st.sampled_from((1, 9, 256, 300, 513)))
def test_hidden_chunk_invariance_bit_for_bit(case, chunk_size, spec):
    check_hidden_chunk_invariance(case.with_(chunk_size=chunk_size), spec, exact=True)


@pytest.mark.tier("contract")
@given(case=hidden_cases(with_entropy=st.just(True)))
def test_hidden_gate_invariance(case, spec):
    check_hidden_gate_invariance(case, spec)


@pytest.mark.tier("hardening")
@given(case=hidden_cases(with_entropy=st.just(True)))
def test_hidden_gate_invariance_bit_for_bit(case, spec):
    check_hidden_gate_invariance(case, spec, exact=True)


@pytest.mark.tier("contract")
@given(case=hidden_cases())
def test_hidden_inputs_unmutated(case, spec):
    check_hidden_inputs_unmutated(case, spec)


@pytest.mark.tier("contract")
@given(case=hidden_cases(tp=st.sampled_from((2, 4))))
def test_hidden_tp_ranks_agree(case, spec):
    check_hidden_tp_consistency(case, spec)
