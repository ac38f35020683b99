"""Regression for BUGS.md #3: the one_hot OOM in the chunked log-prob backward.

SkyRL's old ``ChunkedDistributedLogprob.backward`` built, per chunk,
``one_hot(masked_target, num_classes=V_local)`` (int64, 8 bytes an element)
plus a float copy: about 65 GB transient at B=128, S=280, V=151,936 (SkyRL
#1650; still open in NeMo-RL #4114). slime's analogue, issue #1951, was one
``[T, V]`` fp32 allocation of 58.14 GiB at T=205,280, V=76,032. The gradients
were CORRECT, so value checks cannot see this: the peak of live tensor bytes
is measured at the REAL scale under fake tensors (nothing is allocated) and
must stay within DESIGN.md's bound (2x logits plus one chunk working set, plus
per-row vectors), and no int64 tensor with a vocabulary-sized dimension may
ever exist.

Mutant: ``one_hot_backward``.
"""

import pytest

from harness.memory import MemoryCase, int64_with_dimension, measure_token_memory
from harness.targets import load_target

REAL_SCALE = {
    "slime-1951-tp1": MemoryCase(rows=205_280, vocab_local=76_032),
    "slime-1951-tp8": MemoryCase(rows=205_280, vocab_local=76_032 // 8),
    "skyrl-1650": MemoryCase(rows=128 * 280, vocab_local=151_936),
}


@pytest.mark.parametrize("name", sorted(REAL_SCALE))
def test_backward_memory_at_real_scale(name, target):
    case = REAL_SCALE[name]
    report = measure_token_memory(case, load_target(target))
    print(report)
    assert report.peak <= case.bound(), f"{name}: {report}"
    one_hots = int64_with_dimension(report.allocations, case.vocab_local)
    assert not one_hots, f"{name}: int64 tensors with a V_local={case.vocab_local} dimension were created: {one_hots}"
