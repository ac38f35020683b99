"""Self-tests of the live-storage tracker: meta, fake and real agree, views count once, frees count."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from harness.memory.hidden import HiddenMemoryCase, measure_hidden_memory, target_runner
from harness.memory.logits import MemoryCase, measure_token_memory
from harness.memory.tracker import LiveStorageTracker, int64_with_dimension, traces_on_meta
from harness.targets import load_target


@pytest.mark.parametrize(
    "case",
    [
        MemoryCase(rows=64, vocab_local=50, chunk_size=7),
        MemoryCase(rows=64, vocab_local=50, chunk_size=None, dtype="bfloat16"),
        MemoryCase(rows=33, vocab_local=17, chunk_size=100, backward=False),
        MemoryCase(rows=40, vocab_local=9, with_entropy=False),
    ],
    ids=str,
)
def test_fake_and_real_peaks_agree(case):
    target = load_target("impl")
    assert measure_token_memory(case, target, fake=True).peak == measure_token_memory(case, target, fake=False).peak


class UnderFakeTensorMode:
    """The same target, not declaring ``traces_on_meta``: its traces run under FakeTensorMode."""

    traces_on_meta = False

    def __init__(self, target):
        self.target = target

    def __getattr__(self, name):
        return getattr(self.target, name)


def _log(report) -> tuple:
    return report.peak, [(a.op, a.shape, a.dtype, a.nbytes) for a in report.allocations]


@pytest.mark.parametrize(
    "case",
    [
        MemoryCase(rows=3000, vocab_local=700, chunk_size=256),
        MemoryCase(rows=3000, vocab_local=700, chunk_size=None, dtype="bfloat16", with_entropy=False),
        MemoryCase(rows=3000, vocab_local=700, backward=False),
    ],
    ids=str,
)
def test_meta_and_fake_traces_of_impl_are_the_same_trace(case):
    """impl's real-scale traces run on meta tensors (six times cheaper): the same allocations, op by op."""
    impl = load_target("impl")
    assert traces_on_meta(impl) and not traces_on_meta(UnderFakeTensorMode(impl))
    meta, fake = measure_token_memory(case, impl), measure_token_memory(case, UnderFakeTensorMode(impl))
    assert _log(meta) == _log(fake)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_meta_and_fake_hidden_traces_of_impl_are_the_same_trace(dtype):
    case = HiddenMemoryCase(rows=1300, hidden_size=64, vocab_local=1024, dtype=dtype, chunk_size=512)
    run = target_runner(load_target("impl"), case)
    assert _log(measure_hidden_memory(case, run, meta=True)) == _log(measure_hidden_memory(case, run, meta=False))


def test_views_count_once_and_frees_are_subtracted():
    with LiveStorageTracker() as tracker:
        a = torch.zeros(1000)
        view = a[10:20]
        assert tracker.current == 4000
        b = torch.ones(500)
        assert tracker.current == 6000
        del b
        assert tracker.current == 4000
        del view, a
    assert tracker.peak == 6000 and tracker.current == 0


def test_fake_tensors_count_without_allocating():
    with FakeTensorMode(), LiveStorageTracker() as tracker:
        huge = torch.empty(200_000, 100_000)
        assert tracker.current == 200_000 * 100_000 * 4
        del huge
    assert tracker.peak == 8 * 10**10


def test_int64_vocabulary_tensors_are_flagged():
    with LiveStorageTracker() as tracker:
        one_hot = torch.nn.functional.one_hot(torch.tensor([1, 2]), 37)
    assert [a.shape for a in int64_with_dimension(tracker.allocations, 37)] == [tuple(one_hot.shape)]
