"""Peak memory of the logits-level entry points (token and packed), at any scale.

The budget of docs/design.md ("Budgets"): forward+backward with the entropy
gradient at most the logits plus their gradient plus one chunk's working set
and a per-row allowance. Measured with the live-storage tracker
(``harness.memory.tracker``), on real tensors or under fake tensors at the
historic scales of docs/bugs.md #3, where nothing is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.memory.tracker import LiveStorageTracker, data_free, trace_without_data, traces_on_meta


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


def handed(leaf: torch.Tensor) -> torch.Tensor:
    """The logits a memory trace hands the target: an activation, as the LM head's output is in a trainer.

    A leaf that requires grad would make an in-place write (verl's processor
    divides the logits by the temperature in place) raise, and the budget check
    would read that crash instead of the memory (one defect, one red check; the
    value jobs hand a copy for the same reason, ``harness.jobs.inputs``). The
    copy is what the trace counts as the input; the leaf stands for the LM
    head that produced it, is created before the trace and never counted, and
    receives the gradient through the copy without another allocation.
    """
    return leaf.clone() if leaf.requires_grad else leaf


@dataclass
class MemoryReport:
    case: MemoryCase
    peak: int
    allocations: list = field(repr=False)
    method: str = ""  # how it was measured, where not as asked (``trace_without_data``'s fallback)

    @property
    def ratio(self) -> float:
        return self.peak / self.case.unit

    def __str__(self) -> str:
        return (
            f"peak {self.peak / 2**30:.3f} GiB = {self.ratio:.4f} x logits "
            f"(bound {self.case.bound() / self.case.unit:.4f} x) for {self.case}"
        ) + (f"; {self.method}" if self.method else "")


def measure_packed_memory(case: MemoryCase, target, inputs_factory, *, response_only: bool) -> MemoryReport:
    """Peak live bytes of the target's packed forward+backward, nothing allocated (``data_free``).

    ``inputs_factory(device)`` builds the PackedInputs on the trace's device
    (inside the fake mode, or on meta tensors); ``case.rows`` is the whole stream.
    """
    with data_free(traces_on_meta(target)) as device:
        leaf = torch.zeros(case.rows, case.vocab_local, dtype=case.torch_dtype, requires_grad=True, device=device)
        logits = handed(leaf)
        inputs = inputs_factory(device)
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


def token_forward_backward(case: MemoryCase, target, logits: torch.Tensor, targets: torch.Tensor) -> None:
    """What a token-level memory measurement runs: the forward, then (``case.backward``) a ``sum()`` backward.

    The upstream gradients are ones, so nothing but the computation under test
    adds to the peak; outputs are dropped before returning.
    """
    with torch.set_grad_enabled(case.backward):
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


def measure_token_memory(case: MemoryCase, target, *, fake: bool = True) -> MemoryReport:
    """Peak live bytes of the target's token-level forward (+ backward) for ``case``.

    The upstream gradients are ones (a ``sum()``), so nothing but the
    computation under test adds to the peak. ``fake``: nothing allocated
    (``trace_without_data``: a target that reads a value runs on real tensors at fewer rows).
    """

    def run(case: MemoryCase, device="cpu") -> MemoryReport:
        logits = handed(
            torch.zeros(case.rows, case.vocab_local, dtype=case.torch_dtype, requires_grad=case.backward, device=device)
        )
        targets = torch.zeros(case.rows, dtype=torch.long, device=device)
        tracker = LiveStorageTracker().track(logits, targets)
        with tracker:
            token_forward_backward(case, target, logits, targets)
        return MemoryReport(case, tracker.peak, tracker.allocations)

    if not fake:
        return run(case)
    return trace_without_data(run, case, meta=traces_on_meta(target))
