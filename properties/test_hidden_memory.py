"""The memory contract of the fused hidden-state path, measured by the live-storage tracker.

Peak live bytes of forward + backward (entropy gradient on) at most the
inputs + their gradients + 4 chunks of fp32 logits ``[chunk, V_local]`` (+ the
fp32 grad_weight accumulator of a non-fp32 head, + the per-row allowance),
never ``[rows, V_local]``: at the real scale under fake tensors (T=205,280,
H=4096, V=151,936 at tp 8; nothing allocated), and on generated small shapes
on real tensors (chunk sizes that are multiples of the 256-row matmul block,
so the bound's chunk is the chunk the caller asked for).
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.checks.failure import MEMORY, ensure
from harness.checks.parity import require
from harness.memory.hidden import (
    REAL_SCALES,
    HiddenMemoryCase,
    measure_hidden_memory,
    real_scale_report,
    target_runner,
)
from harness.targets import load_target


def _capabilities(case: HiddenMemoryCase) -> set[str]:
    return {"hidden", "chunking"} | ({"entropy"} if case.with_entropy else set())


@pytest.mark.tier("budget")
@pytest.mark.parametrize("name", sorted(REAL_SCALES))
def test_hidden_forward_backward_at_real_scale(name, spec):
    case = REAL_SCALES[name]
    require(spec, _capabilities(case))
    report = real_scale_report(load_target(spec), case)
    print(report)
    ensure(report.peak <= report.case.bound(), MEMORY, str(report))


@st.composite
def small_cases(draw):
    return HiddenMemoryCase(
        rows=draw(st.integers(1, 1100)),
        hidden_size=draw(st.integers(1, 48)),
        vocab_local=draw(st.integers(1, 96)),
        dtype=draw(st.sampled_from(("float32", "bfloat16", "float16"))),
        chunk_size=draw(st.sampled_from((None, 256, 512))),
        with_entropy=draw(st.booleans()),
        entropy_grad=draw(st.booleans()),
    )


@pytest.mark.tier("budget")
@given(case=small_cases())
def test_hidden_generated_shapes_within_bound(case, spec):
    require(spec, _capabilities(case))
    report = measure_hidden_memory(case, target_runner(load_target(spec), case), fake=False)
    ensure(report.peak <= case.bound(), MEMORY, str(report))
