"""Peak live tensor bytes of a computation, on real tensors, on meta tensors or under FakeTensorMode.

The one_hot OOM (docs/bugs.md #3) had CORRECT gradients: only memory was wrong, so
value checks cannot see it. This tracker is a dispatch mode that registers the
storage of every tensor an op returns (and the inputs handed to ``track``),
counts its bytes while the storage lives (a weakref finalizer subtracts them
when it is freed) and keeps the peak. Storage Python objects are preserved by
torch, so views of a live storage are not counted twice.

On meta tensors or under ``FakeTensorMode`` nothing is allocated, so the
historic scales (T=205,280 x V=76,032, 58 GiB of fp32 logits) are measured on
a CPU. Meta tensors are the cheap way for code that reads no tensor value
(``traces_on_meta``: impl); FakeTensorMode is the general one (data-dependent
sizes are bounded). Fake tensors must stay on the CPU device: a fake CUDA
tensor aborts the CPU build of torch.

Every allocation is also logged (op, shape, dtype, bytes), so a check can
assert that no int64 tensor with a vocabulary-sized dimension ever existed.

Code that branches on a tensor's VALUE (verl's ``assert torch.all(temperature
> 0).item()``) cannot be traced without data: the fake trace stops at a
data-dependent guard. Such a target is measured on real tensors at
``REAL_TRACE_ROWS`` rows of the same vocabulary and chunk size
(``trace_without_data``), and its report says so: the one_hot mechanism and
the budget's ratio to the logits do not depend on the row count, and a
computation at the real scale would need the tens of GiB this tracker exists
to avoid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_DEVICE_QUERY = torch.ops.prim.device.default


@dataclass(frozen=True)
class Allocation:
    op: str
    shape: tuple
    dtype: torch.dtype
    nbytes: int


@dataclass
class LiveStorageTracker(TorchDispatchMode):
    """Peak bytes of live tensor storage while the mode is active (see module docstring)."""

    current: int = 0
    peak: int = 0
    allocations: list = field(default_factory=list)
    _live: dict = field(default_factory=dict)

    def __post_init__(self):
        super().__init__()

    def track(self, *tensors: torch.Tensor) -> LiveStorageTracker:
        """Count tensors that exist before the computation (its inputs) as live."""
        for tensor in tensors:
            self._register(tensor, "input")
        return self

    def _free(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)

    def _register(self, tensor: torch.Tensor, op: str) -> None:
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self._live:
            return
        nbytes = _upper_bound(storage.nbytes())
        self._live[key] = nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        self.allocations.append(Allocation(op, tuple(tensor.shape), tensor.dtype, nbytes))
        weakref.finalize(storage, self._free, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _DEVICE_QUERY and hasattr(args[0], "fake_device"):
            # ``tensor.device`` on a fake tensor allocates nothing. Answered here instead of by a second mode's
            # dispatch: more than half a real-scale trace's dispatched ops are device queries (a seventh of its time).
            return args[0].fake_device
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._register(value, str(func.overloadpacket.__name__))
        return out


def _upper_bound(value) -> int:
    """A concrete byte count; for a data-dependent size (masked_select under fake tensors) its upper bound.

    Fake tensors give ops like ``masked_select`` an unbacked symbolic size whose
    value range torch bounds by the input's element count. Counting that
    bound over-estimates the peak, never under-estimates it.
    """
    if isinstance(value, int):
        return value
    node = value.node
    if not node.expr.free_symbols:
        return int(node.expr)
    upper = node.shape_env.bound_sympy(node.expr).upper
    if not upper.is_finite:
        raise ValueError(f"cannot bound the data-dependent size {node.expr} of a tracked tensor")
    return int(upper)


def traces_on_meta(target) -> bool:
    """Whether a target's code reads no tensor value, so a trace may run on meta tensors (``traces_on_meta``).

    Meta tensors dispatch to torch's C++ meta kernels; FakeTensorMode answers every op in Python and costs six
    times as much per op (a real-scale hidden-state trace: about 2.8 s against 0.44 s of CPU at a sixteenth of
    its rows, the same peak and the same allocations). Code that reads a value (``.item()``, a data-dependent
    size such as SkyRL's ``masked_select``) fails on meta tensors, so only a target that declares it runs there;
    every other target, and the kept-set traces, keep FakeTensorMode.
    """
    return bool(getattr(target, "traces_on_meta", False))


@contextlib.contextmanager
def data_free(meta: bool):
    """Where a trace allocates nothing; yields the device its inputs are made on (``"meta"``, or fake ``"cpu"``)."""
    if meta:
        yield "meta"
        return
    with fake_mode():
        yield "cpu"


# Rows of a real-tensor trace for a target that reads tensor values: two chunks of 1024 rows, at most
# 1.2 GiB of fp32 logits at V = 151,936.
REAL_TRACE_ROWS = 2048


def _data_dependent() -> tuple[type[Exception], ...]:
    """The errors of a fake trace that met a branch on a tensor's value (``.item()`` under an ``assert``)."""
    from torch._subclasses.fake_tensor import DataDependentOutputException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return GuardOnDataDependentSymNode, DataDependentOutputException


def trace_without_data(measure, case, *, meta: bool):
    """``measure(case, device)`` with nothing allocated; on real tensors at fewer rows where the code reads a value.

    ``case`` is a dataclass with ``rows``; the report ``measure`` returns has a
    ``case`` and a ``method``. A fallback report holds the smaller case (its
    bound is that case's) and names why it was taken.
    """
    try:
        with data_free(meta) as device:
            return measure(case, device)
    except _data_dependent() as exc:
        smaller = dataclasses.replace(case, rows=min(case.rows, REAL_TRACE_ROWS))
        report = measure(smaller, "cpu")
        report.method = (
            f"real tensors at {smaller.rows} of {case.rows} rows: the code reads a tensor's value "
            f"({type(exc).__name__} under fake tensors)"
        )
        return report


def fake_mode():
    """FakeTensorMode that also traces data-dependent output shapes (SkyRL's backward uses masked_select)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    return FakeTensorMode(shape_env=ShapeEnv(allow_dynamic_output_shape_ops=True))


def int64_with_dimension(allocations: list, size: int) -> list[Allocation]:
    """Allocations (inputs excluded) of int64 tensors with a dimension of ``size``: a one_hot over the vocabulary."""
    return [a for a in allocations if a.dtype == torch.int64 and size in a.shape and a.op != "input"]
