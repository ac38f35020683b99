"""Peak live tensor bytes of a computation, on real tensors or under FakeTensorMode.

The one_hot OOM (docs/bugs.md #3) had CORRECT gradients: only memory was wrong, so
value checks cannot see it. This tracker is a dispatch mode that registers the
storage of every tensor an op returns (and the inputs handed to ``track``),
counts its bytes while the storage lives (a weakref finalizer subtracts them
when it is freed) and keeps the peak. Storage Python objects are preserved by
torch, so views of a live storage are not counted twice.

Under ``FakeTensorMode`` nothing is allocated, so the historic scales
(T=205,280 x V=76,032, 58 GiB of fp32 logits) are measured on a CPU in well
under a second. Fake tensors must stay on the CPU device: a fake CUDA tensor
aborts the CPU build of torch.

Every allocation is also logged (op, shape, dtype, bytes), so a check can
assert that no int64 tensor with a vocabulary-sized dimension ever existed.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


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


def fake_mode():
    """FakeTensorMode that also traces data-dependent output shapes (SkyRL's backward uses masked_select)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    return FakeTensorMode(shape_env=ShapeEnv(allow_dynamic_output_shape_ops=True))


def int64_with_dimension(allocations: list, size: int) -> list[Allocation]:
    """Allocations (inputs excluded) of int64 tensors with a dimension of ``size``: a one_hot over the vocabulary."""
    return [a for a in allocations if a.dtype == torch.int64 and size in a.shape and a.op != "input"]


def logits_bytes(rows: int, vocab_local: int, dtype: torch.dtype) -> int:
    """docs/math.md's memory unit: ``rows * V_local * element_size``."""
    return rows * vocab_local * torch.empty((), dtype=dtype).element_size()


def chunk_working_set(chunk_rows: int, vocab_local: int) -> int:
    """What one chunk of the fused Function may hold at once: two fp32 ``[chunk, V_local]`` buffers.

    (The forward holds shifted logits and their exponentials; the backward
    log-probabilities and probabilities, the latter becoming the gradient.)
    """
    return 2 * chunk_rows * vocab_local * 4


# Per-row vectors every implementation needs (targets, row statistics, maxima,
# log-probs, entropy, index vectors): a generous fixed allowance per row.
ROW_ALLOWANCE_BYTES = 96


@dataclass(frozen=True)
class MemoryCase:
    """A memory problem at any scale: nothing here is materialised unless ``fake=False``."""

    rows: int
    vocab_local: int
    dtype: str = "float32"
    chunk_size: int | None = 1024
    with_entropy: bool = True
    entropy_grad: bool = True
    backward: bool = True

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def unit(self) -> int:
        return logits_bytes(self.rows, self.vocab_local, self.torch_dtype)

    @property
    def chunk_rows(self) -> int:
        return self.rows if self.chunk_size is None else min(self.chunk_size, self.rows)

    def bound(self, donated: bool = False) -> int:
        """docs/design.md: 2x logits (+ a chunk) with the backward, 1x logits (+ a chunk) forward only or donated."""
        copies = 2 if self.backward and not donated else 1
        return (
            copies * self.unit + chunk_working_set(self.chunk_rows, self.vocab_local) + self.rows * ROW_ALLOWANCE_BYTES
        )


# The scales at which the historic OOMs hit (docs/math.md "Memory units"), fp32,
# entropy with its gradient, slime's reference chunk of 1024 rows unless noted.
HISTORIC_SCALES = {
    "slime-1951-tp1": MemoryCase(rows=205_280, vocab_local=76_032),
    "slime-1951-tp8": MemoryCase(rows=205_280, vocab_local=76_032 // 8),
    "skyrl-1650": MemoryCase(rows=128 * 280, vocab_local=151_936),
    # SkyRL #1650 as it OOMed: one chunk spanning every row of the batch.
    "skyrl-1650-one-chunk": MemoryCase(rows=128 * 280, vocab_local=151_936, chunk_size=128 * 280),
}


@dataclass
class MemoryReport:
    case: MemoryCase
    peak: int
    allocations: list = field(repr=False)

    @property
    def ratio(self) -> float:
        return self.peak / self.case.unit

    def __str__(self) -> str:
        return (
            f"peak {self.peak / 2**30:.3f} GiB = {self.ratio:.4f} x logits "
            f"(bound {self.case.bound() / self.case.unit:.4f} x) for {self.case}"
        )


def measure_packed_memory(case: MemoryCase, target, inputs_factory, *, response_only: bool) -> MemoryReport:
    """Peak live bytes of the target's packed forward+backward under fake tensors.

    ``inputs_factory()`` builds the PackedInputs inside the fake mode (its
    token tensors are fake too); ``case.rows`` is the whole stream.
    """
    with fake_mode():
        logits = torch.zeros(case.rows, case.vocab_local, dtype=case.torch_dtype, requires_grad=True)
        inputs = inputs_factory()
        tracker = LiveStorageTracker().track(logits, *inputs.tokens)
        with tracker:
            log_probs, entropy = target.packed_log_probs(
                logits,
                inputs,
                tp_group=None,
                cp_group=None,
                chunk_size=case.chunk_size,
                with_entropy=case.with_entropy,
                entropy_grad=case.entropy_grad,
                temperature=1.0,
                response_only=response_only,
                loss_mask_only=False,
            )
            loss = sum(v.sum() for v in log_probs) + sum(v.sum() for v in entropy or [])
            loss.backward()
            del log_probs, entropy, loss
        return MemoryReport(case, tracker.peak, tracker.allocations)


def measure_token_memory(case: MemoryCase, target, *, fake: bool = True) -> MemoryReport:
    """Peak live bytes of the target's token-level forward (+ backward) for ``case``.

    The upstream gradients are ones (a ``sum()``), so nothing but the
    computation under test adds to the peak.
    """

    def run() -> MemoryReport:
        logits = torch.zeros(case.rows, case.vocab_local, dtype=case.torch_dtype, requires_grad=case.backward)
        targets = torch.zeros(case.rows, dtype=torch.long)
        tracker = LiveStorageTracker().track(logits, targets)
        with tracker, torch.set_grad_enabled(case.backward):
            log_probs, entropy = target.token_log_probs(
                logits,
                targets,
                tp_group=None,
                chunk_size=case.chunk_size,
                with_entropy=case.with_entropy,
                entropy_grad=case.entropy_grad,
                temperature=1.0,
            )
            if case.backward:
                loss = log_probs.sum()
                if entropy is not None and entropy.requires_grad:
                    loss = loss + entropy.sum()
                loss.backward()
            del log_probs, entropy
        return MemoryReport(case, tracker.peak, tracker.allocations)

    if not fake:
        return run()
    with fake_mode():
        return run()
