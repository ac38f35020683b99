"""Regression for docs/bugs.md #3: the one_hot OOM in the chunked log-prob backward.

SkyRL's old ``ChunkedDistributedLogprob.backward`` built, per chunk,
``one_hot(masked_target, num_classes=V_local)`` (int64, 8 bytes an element)
plus a float copy to place the gradient of the chosen token: about 65 GB
transient at B=128, S=280, V=151,936 with one chunk over the batch (SkyRL
#1650; still open in NeMo-RL #4114). The gradients were CORRECT, so value
checks cannot see it. The log-prob forward+backward runs at the REAL scales
under fake tensors (nothing is allocated) and no int64 tensor with a
vocabulary-sized dimension may exist at any point.

What this file checks is the bug's mechanism, on the log-prob path where it
lived (the entropy has its own regression, docs/bugs.md #2). docs/design.md's whole
memory budget (2x logits + a chunk, entropy gradient included) at the same
scales is a property: ``properties/test_memory_bounds.py``. An implementation
can exceed that budget without any one_hot, and a fixed upstream version
must not be reported as carrying this bug for it.

Mutant: ``one_hot_backward``.
"""

import dataclasses

import pytest

from harness.checks.failure import MEMORY, ensure
from harness.checks.parity import require
from harness.memory.hidden import REAL_SCALES as HIDDEN_REAL_SCALES
from harness.memory.hidden import real_scale_report
from harness.memory.logits import HISTORIC_SCALES, measure_token_memory
from harness.memory.tracker import int64_with_dimension
from harness.targets import load_target

pytestmark = pytest.mark.tier("contract")


def _describe(allocations) -> str:
    largest = max(allocations, key=lambda a: a.nbytes)
    return (
        f"{len(allocations)} int64 allocations with a V_local dimension during forward+backward, "
        f"the largest {largest.op} -> {list(largest.shape)} ({largest.nbytes / 2**30:.2f} GiB)"
    )


@pytest.mark.parametrize("name", sorted(HISTORIC_SCALES))
def test_no_vocab_sized_int64_in_log_prob_backward(name, spec):
    require(spec, {"token", "chunking"})
    case = dataclasses.replace(HISTORIC_SCALES[name], with_entropy=False)
    report = measure_token_memory(case, load_target(spec))
    print(report)
    one_hots = int64_with_dimension(report.allocations, case.vocab_local)
    # The message is built only on a failure: _describe needs at least one allocation.
    ensure(not one_hots, MEMORY, lambda: f"{name}: a one_hot over the vocabulary: {_describe(one_hots)}; {report}")


def test_no_vocab_sized_int64_in_hidden_state_backward(spec):
    """The same mechanism on the hidden-state path: NeMo-RL's ChunkedDistributedHiddenStatesToLogprobs
    still builds one_hot in its backward. T=205,280, H=4096, V=151,936 at tp 8, chunk 1024, log-probs only."""
    require(spec, {"hidden", "chunking"})
    case = dataclasses.replace(HIDDEN_REAL_SCALES["qwen-tp8-fp32"], with_entropy=False)
    report = real_scale_report(load_target(spec), case)
    print(report)
    one_hots = int64_with_dimension(report.allocations, case.vocab_local)
    ensure(
        not one_hots,
        MEMORY,
        lambda: f"a one_hot over the vocabulary on the hidden-state path: {_describe(one_hots)}; {report}",
    )
