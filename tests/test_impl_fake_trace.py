"""impl's kept-set path traces under the fake tensors of the older torch it supports (pyproject: torch>=2.4).

The budget check ``properties/test_sampling.py::test_kept_set_path_builds_no_vocabulary_sized_mask``
runs the kept-set path at real scale under fake tensors, where the number of kept entries is a
data-dependent size. torch 2.11 (the build on the lent GPU machines) cannot trace two kinds of op over
such a length, as measured with its CPU wheel:

* a unary in-place op: ``clamp_``, ``clamp_min_`` (a number or a tensor bound), ``exp_``,
  ``nan_to_num_`` and ``maximum(out=)`` raise ``GuardOnDataDependentSymNode`` (``Eq(u0, 1)``); the
  binary in-place ops ``sub_``, ``mul_`` and ``div_`` trace;
* a slice that is not the whole length: each such slice gets a size of its own, so comparing
  ``keys[1:]`` with ``keys[:-1]`` and writing it into ``first[1:]`` asks to prove two unknown sizes equal.

torch 2.13 (the suite's pin) traces both, so the CPU suite cannot see the failure; the GPU suite showed
it as a FAIL of the budget check. This test names the ops instead, so the path stays traceable on both.
"""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.memory.logits import MemoryCase
from harness.memory.sampling import SamplingMemoryCase, measure_sampling_memory
from harness.targets import load_target

aten = torch.ops.aten
# Measured on torch 2.11 (module docstring): in-place ops it cannot trace on a data-dependent length.
UNTRACEABLE_IN_PLACE = {
    aten.clamp_.default,
    aten.clamp_.Tensor,
    aten.clamp_min_.default,
    aten.clamp_min_.Tensor,
    aten.exp_.default,
    aten.nan_to_num_.default,
    aten.maximum.out,
}
WHOLE = 2**62  # a slice's end past any length: ``x[a:]``


def _data_dependent(size) -> bool:
    return isinstance(size, torch.SymInt) and bool(size.node.expr.free_symbols)


def _partial_slice(args) -> bool:
    """``aten.slice.Tensor(self, dim, start, end, step)`` over a data-dependent length, not the whole of it."""
    tensor, dim, start, end = (list(args) + [0, None, None])[:4]
    size = tensor.shape[dim]
    if not _data_dependent(size):
        return False
    whole_end = (
        end is None
        or (isinstance(end, int) and end >= WHOLE)
        or (isinstance(end, torch.SymInt) and end.node.expr == size.node.expr)
    )
    return start not in (None, 0) or not whole_end


class OlderTorchLimits(TorchDispatchMode):
    """Records each op the older torch's fake tensors cannot trace (module docstring), with its shape."""

    def __init__(self):
        super().__init__()
        self.untraceable = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and any(_data_dependent(d) for d in first.shape):
            if func in UNTRACEABLE_IN_PLACE or (func is aten.slice.Tensor and _partial_slice(args)):
                self.untraceable.append(f"{func}{tuple(first.shape)} {args[1:]}")
        return func(*args, **(kwargs or {}))


def test_the_kept_set_path_issues_no_op_the_older_torch_cannot_trace():
    case = SamplingMemoryCase(MemoryCase(rows=64, vocab_local=96, chunk_size=16), kept_per_row=5)
    limits = OlderTorchLimits()
    with limits:
        report = measure_sampling_memory(case, load_target("impl"))
    assert report.peak > 0
    assert not limits.untraceable, f"ops torch 2.11 cannot trace under fake tensors: {limits.untraceable}"


def test_the_detector_sees_both_kinds_of_op():
    """Without this the test above could not fail: a unary in-place op and a partial slice, each recorded."""
    from harness.memory.tracker import fake_mode

    limits = OlderTorchLimits()
    with fake_mode():
        keys = torch.zeros(10)[torch.zeros(10) > 0]
        with limits:
            keys.clone().clamp_(min=-1.0)
            keys[1:]
            keys[:-1]
            keys.clone().mul_(keys)
            keys[0 : keys.shape[0]]
    assert [entry.split("(")[0] for entry in limits.untraceable] == ["aten.clamp_.default"] + ["aten.slice.Tensor"] * 2
