"""Peak live memory stays within docs/design.md's bounds, on generated shapes and at the historic scales.

Units (docs/math.md): ``logits_bytes = rows * V_local * element_size``; a chunk
working set is two fp32 ``[chunk, V_local]`` buffers; every row may also hold
a few per-row vectors (``ROW_ALLOWANCE_BYTES``).

* forward + backward with the entropy gradient: 2x logits + a chunk;
* forward only: 1x logits + a chunk;
* donation: 1x logits + a chunk (the gradient IS the logits' storage);
* response-only: nothing scales with the dropped rows: the same 2x of the
  stream's logits (input + its gradient), with a chunk of the kept rows.

Generated shapes run on real tensors; the real scales (slime #1951, SkyRL
#1650) under fake tensors, nothing allocated (code that reads a tensor's value:
on real tensors at fewer rows, ``harness.memory.tracker.trace_without_data``;
the bound is then the smaller case's).
"""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from harness.checks import record
from harness.checks.failure import MEMORY, ensure
from harness.checks.parity import require
from harness.memory.logits import (
    HISTORIC_SCALES,
    ROW_ALLOWANCE_BYTES,
    MemoryCase,
    chunk_working_set,
    measure_packed_memory,
    measure_token_memory,
)
from harness.memory.tracker import traces_on_meta
from harness.targets import PackedInputs, load_target

pytestmark = pytest.mark.tier("budget")


def measured(report):
    """Record the figure a base-vs-PR gate compares (peak / logits bytes, on this case), then hand it back."""
    record.figure(record.PEAK_OVER_LOGITS, report.ratio, report.case)
    return report


class DonatingTarget:
    """The target under test, asked to donate its logits (capability ``donation``)."""

    def __init__(self, target):
        self.target = target
        self.traces_on_meta = traces_on_meta(target)

    def token_log_probs(self, logits, targets, **kwargs):
        return self.target.token_log_probs(logits, targets, donate_logits=True, **kwargs)


@st.composite
def memory_cases(draw):
    rows = draw(st.integers(1, 300))
    return MemoryCase(
        rows=rows,
        vocab_local=draw(st.integers(1, 300)),
        dtype=draw(st.sampled_from(("float32", "bfloat16", "float16"))),
        chunk_size=draw(st.one_of(st.none(), st.integers(1, rows + 3))),
        with_entropy=draw(st.booleans()),
        entropy_grad=draw(st.booleans()),
        backward=draw(st.booleans()),
    )


@given(case=memory_cases())
def test_generated_shapes_within_bound(case, spec):
    require(spec, {"token", "chunking"} | ({"entropy"} if case.with_entropy else set()))
    report = measured(measure_token_memory(case, load_target(spec), fake=False))
    ensure(report.peak <= case.bound(), MEMORY, str(report))


@given(case=memory_cases())
def test_donation_within_one_logits(case, spec):
    require(spec, {"token", "chunking", "donation"} | ({"entropy"} if case.with_entropy else set()))
    case = case.__class__(**{**case.__dict__, "backward": True})
    report = measured(measure_token_memory(case, DonatingTarget(load_target(spec)), fake=False))
    bound = case.bound(donated=True)
    ensure(report.peak <= bound, MEMORY, f"{report}; donation bound {bound / case.unit:.4f} x")


REAL_SCALE = {name: HISTORIC_SCALES[name] for name in ("slime-1951-tp1", "slime-1951-tp8", "skyrl-1650")}


@pytest.mark.parametrize("name", sorted(REAL_SCALE))
def test_forward_backward_at_real_scale(name, spec):
    """docs/design.md's budget at the scales that OOMed: 2x logits + a chunk, entropy gradient included.

    The one_hot regression checks that bug's mechanism; this is the whole
    budget, which an implementation can exceed without any one_hot (e.g. by
    concatenating per-chunk gradients into a second [rows, V_local] buffer).
    """
    require(spec, {"token", "entropy", "chunking"})
    case = REAL_SCALE[name]
    report = measured(measure_token_memory(case, load_target(spec)))
    print(report)
    ensure(report.peak <= report.case.bound(), MEMORY, str(report))


@pytest.mark.parametrize("name", sorted(REAL_SCALE))
def test_forward_only_at_real_scale(name, spec):
    require(spec, {"token", "entropy", "chunking"})
    case = MemoryCase(**{**REAL_SCALE[name].__dict__, "backward": False})
    report = measured(measure_token_memory(case, load_target(spec)))
    print(report)
    ensure(report.peak <= report.case.bound(), MEMORY, str(report))


@pytest.mark.parametrize("name", sorted(REAL_SCALE))
def test_donation_at_real_scale(name, spec):
    require(spec, {"token", "donation", "entropy", "chunking"})
    case = REAL_SCALE[name]
    report = measured(measure_token_memory(case, DonatingTarget(load_target(spec))))
    print(report)
    ensure(
        report.peak <= report.case.bound(donated=True),
        MEMORY,
        f"{report}; donation bound {report.case.bound(True) / report.case.unit:.4f} x",
    )


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5])
def test_response_only_buffers_scale_with_kept_rows(fraction, spec):
    """slime #2076 at the #1951 scale: 160 samples of 1283 tokens, a fraction of them response."""
    require(spec, {"packed", "response_only", "entropy", "chunking"})
    total, samples = 1283, 160
    response = int(total * fraction)
    case = MemoryCase(rows=total * samples, vocab_local=76_032)

    def inputs(device):
        return PackedInputs(
            tokens=[torch.zeros(total, dtype=torch.long, device=device) for _ in range(samples)],
            total_lengths=[total] * samples,
            response_lengths=[response] * samples,
            loss_masks=[torch.ones(response, device=device) for _ in range(samples)],
            qkv_format="thd",
            pad_multiple=1,
        )

    report = measured(measure_packed_memory(case, load_target(spec), inputs, response_only=True))
    print(report)
    kept = response * samples
    bound = 2 * case.unit + chunk_working_set(min(case.chunk_rows, kept), case.vocab_local)
    ensure(report.peak <= bound + case.rows * ROW_ALLOWANCE_BYTES, MEMORY, f"{report}; bound {bound / case.unit:.4f} x")
