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


class ReadsTemperature:
    """impl behind a value check on the temperature (verl's ``assert torch.all(temperature > 0).item()``), with a
    one_hot over the vocabulary in its forward: a fake trace stops at the value; the real-tensor fallback must
    still see the one_hot and still judge against the bound of what it measured."""

    traces_on_meta = False

    def __init__(self, one_hot: bool):
        self.impl, self.one_hot = load_target("impl"), one_hot

    def token_log_probs(self, logits, targets, *, temperature, **kwargs):
        assert torch.all(torch.full((logits.shape[0],), float(temperature)) > 0).item()
        if self.one_hot:
            torch.nn.functional.one_hot(targets, logits.shape[-1])
        return self.impl.token_log_probs(logits, targets, temperature=temperature, **kwargs)


@pytest.mark.parametrize("one_hot", [False, True])
def test_a_target_that_reads_a_value_is_measured_on_real_tensors_at_fewer_rows(one_hot, monkeypatch):
    from harness.memory import tracker

    monkeypatch.setattr(tracker, "REAL_TRACE_ROWS", 96)
    case = MemoryCase(rows=10**7, vocab_local=50, chunk_size=32)  # 2 GB of fp32 logits: never allocated
    report = measure_token_memory(case, ReadsTemperature(one_hot))
    assert report.case.rows == 96 and report.case.chunk_size == 32 and report.case.vocab_local == 50
    assert "real tensors at 96 of 10000000 rows" in str(report) and "GuardOnDataDependentSymNode" in report.method
    assert bool(int64_with_dimension(report.allocations, case.vocab_local)) is one_hot
    # The fallback measures what the real-tensor run measures, at the smaller case.
    assert report.peak == measure_token_memory(report.case, ReadsTemperature(one_hot), fake=False).peak


def test_a_target_that_reads_no_value_keeps_the_case_it_was_asked():
    case = MemoryCase(rows=3000, vocab_local=700, chunk_size=256)
    report = measure_token_memory(case, UnderFakeTensorMode(load_target("impl")))
    assert report.case == case and report.method == ""
