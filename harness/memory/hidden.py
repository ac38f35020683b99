"""Peak live bytes of the hidden-state path, on real tensors or at real scale under fake tensors.

The contract of a fused LM-head path: peak live bytes at most
the inputs (``hidden``, ``weight``, targets) + their gradients + a small
multiple of ONE chunk of fp32 logits ``[chunk, V_local]``, never anything
proportional to ``rows x V_local``. Measured by the same live-storage tracker
as the logits path (``harness.memory.logits``), so the real scales (T=205,280,
H=4096, V=151,936 at tp 8) run on a CPU without allocating.

Four documented extras: a chunk's hidden-sized working set (``[chunk, H]``
fp32, the chunk's grad_hidden before its TP sum) beside each chunk of
logits; a head that is not fp32 has its gradient accumulated
in an fp32 ``[V_local, H]`` buffer (bf16 accumulation over thousands of
chunks would lose it), counted explicitly in the bound as ``accumulator``;
one ``[256, H]`` row block of hidden in its dtype, the zero-padded last
block a batch-invariant path copies (``impl/fixed_gemm.py``: a call's last
row block is run at full size so a row's bits do not follow the row count);
and the streamed tree a TP-invariant path sums grad_hidden over the
vocabulary in (``TREE_BLOCKS``). None of them grows with rows x V_local.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.memory.logits import ROW_ALLOWANCE_BYTES
from harness.memory.tracker import LiveStorageTracker, trace_without_data, traces_on_meta

CHUNKS_ALLOWED = 4  # the fused contract: below inputs + gradients + 4 chunks of logits
# The smallest chunk counted: one row block of a fixed-shape matmul. A batch-invariant fused path computes its
# logits 256 rows at a time, the last block zero-padded (impl.fixed_gemm: a BLAS rounds a row by how many rows
# share the call), so a call of fewer rows still holds one block. Nothing changes for calls and chunks of 256
# rows or more (every real scale); below that, full fp32 logits are under one chunk either way.
ROW_BLOCK = 256
# A TP-invariant fused path sums grad_hidden over the vocabulary in a fixed tree of up to 64 leaf blocks, streamed
# (impl/fixed_gemm.py, ``push_leaf``): at most log2(64) + 1 partial sums ``[H, ROW_BLOCK]`` fp32 are alive, plus
# the leaf's product in the working dtype. Eight such blocks, whatever the chunk: 0.41 of one chunk of logits at
# Qwen's real scale (H 4096, V_local 18,992, chunks of 1024 rows); they decide only where H rivals V_local.
TREE_BLOCKS = 8


@dataclass(frozen=True)
class HiddenMemoryCase:
    rows: int
    hidden_size: int
    vocab_local: int
    dtype: str = "float32"
    chunk_size: int | None = 1024
    with_entropy: bool = True
    entropy_grad: bool = True

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()

    @property
    def chunk_rows(self) -> int:
        rows = self.rows if self.chunk_size is None else min(self.chunk_size, self.rows)
        return max(rows, ROW_BLOCK)

    @property
    def chunk_logits_bytes(self) -> int:
        """One chunk of fp32 logits ``[chunk, V_local]``: the unit of the bound."""
        return self.chunk_rows * self.vocab_local * 4

    @property
    def full_logits_bytes(self) -> int:
        """What an unfused path materialises: fp32 ``[rows, V_local]``."""
        return self.rows * self.vocab_local * 4

    @property
    def inputs_bytes(self) -> int:
        return (self.rows + self.vocab_local) * self.hidden_size * self.element_size + self.rows * 8

    @property
    def gradients_bytes(self) -> int:
        return (self.rows + self.vocab_local) * self.hidden_size * self.element_size

    @property
    def accumulator_bytes(self) -> int:
        """The fp32 grad_weight accumulator a non-fp32 head needs (an fp32 head's gradient IS the accumulator)."""
        return 0 if self.dtype == "float32" else self.vocab_local * self.hidden_size * 4

    @property
    def chunk_hidden_bytes(self) -> int:
        """One chunk of fp32 hidden-sized rows ``[chunk, H]`` (a chunk's grad_hidden before its TP sum)."""
        return self.chunk_rows * self.hidden_size * 4

    @property
    def padded_block_bytes(self) -> int:
        """One row block of hidden in its dtype ``[ROW_BLOCK, H]``: the zero-padded copy of a call's last block."""
        return ROW_BLOCK * self.hidden_size * self.element_size

    @property
    def tree_bytes(self) -> int:
        """The streamed summation tree of grad_hidden over the vocabulary: ``TREE_BLOCKS`` x ``[H, ROW_BLOCK]`` fp32."""
        return TREE_BLOCKS * self.hidden_size * ROW_BLOCK * 4

    def bound(self, chunks: int = CHUNKS_ALLOWED) -> int:
        """inputs + gradients (+ fp32 accumulator) + one padded row block + the summation tree + ``chunks`` x (a
        chunk of fp32 logits and of fp32 hidden rows).

        The hidden-sized terms matter only where ``H`` rivals ``V_local`` (tiny
        generated vocabularies: 38 rows of H 48 against V 8 in bf16 hold the
        padded block and four partial sums of the tree at once); at the real
        scale the hidden chunk is 0.22 of the logits chunk, the tree 0.41 and
        the padded block 0.03.
        """
        return (
            self.inputs_bytes
            + self.gradients_bytes
            + self.accumulator_bytes
            + self.padded_block_bytes
            + self.tree_bytes
            + chunks * (self.chunk_logits_bytes + self.chunk_hidden_bytes)
            + self.rows * ROW_ALLOWANCE_BYTES
        )


@dataclass
class HiddenMemoryReport:
    case: HiddenMemoryCase
    peak: int
    allocations: list = field(repr=False)
    method: str = ""  # how it was measured, where not as asked (``trace_without_data``'s fallback)

    @property
    def chunks_above_floor(self) -> float:
        """(peak - inputs - gradients - accumulator) in units of one chunk of fp32 logits."""
        floor = self.case.inputs_bytes + self.case.gradients_bytes + self.case.accumulator_bytes
        return (self.peak - floor) / self.case.chunk_logits_bytes

    def __str__(self) -> str:
        return (
            f"peak {self.peak / 2**30:.3f} GiB = inputs + gradients + {self.chunks_above_floor:.2f} chunks of logits "
            f"(bound {self.case.bound() / 2**30:.3f} GiB; full fp32 logits {self.case.full_logits_bytes / 2**30:.2f} "
            f"GiB) for {self.case}"
        ) + (f"; {self.method}" if self.method else "")


def measure_hidden_memory(case: HiddenMemoryCase, run, *, fake: bool = True, meta: bool = False) -> HiddenMemoryReport:
    """Peak live bytes of ``run(hidden, weight, targets) -> (log_probs, entropy)`` forward + backward.

    The upstream gradients are ones (``sum()``); the gradients left in
    ``hidden.grad`` and ``weight.grad`` are live at the end and counted.
    ``fake``: nothing allocated, on meta tensors where ``meta`` (the target
    ``traces_on_meta``), else under FakeTensorMode (``trace_without_data``: code
    that reads a value runs on real tensors at fewer rows).
    """

    def measure(case: HiddenMemoryCase, device="cpu") -> HiddenMemoryReport:
        shape = {"dtype": case.torch_dtype, "requires_grad": True, "device": device}
        hidden = torch.zeros(case.rows, case.hidden_size, **shape)
        weight = torch.zeros(case.vocab_local, case.hidden_size, **shape)
        targets = torch.zeros(case.rows, dtype=torch.long, device=device)
        tracker = LiveStorageTracker().track(hidden, weight, targets)
        with tracker:
            log_probs, entropy = run(hidden, weight, targets)
            loss = log_probs.sum()
            if entropy is not None and entropy.requires_grad:
                loss = loss + entropy.sum()
            loss.backward()
            del log_probs, entropy, loss
        return HiddenMemoryReport(case, tracker.peak, tracker.allocations)

    if not fake:
        return measure(case)
    return trace_without_data(measure, case, meta=meta)


def real_scale_report(target, case: HiddenMemoryCase) -> HiddenMemoryReport:
    """The target's hidden-state path traced at a real scale: nothing allocated, on meta tensors where declared."""
    return measure_hidden_memory(case, target_runner(target, case), meta=traces_on_meta(target))


def target_runner(target, case: HiddenMemoryCase):
    """``run(hidden, weight, targets)`` through a target's ``hidden_log_probs`` on one rank."""

    def run(hidden, weight, targets):
        return target.hidden_log_probs(
            hidden,
            weight,
            targets,
            tp_group=None,
            chunk_size=case.chunk_size,
            with_entropy=case.with_entropy,
            entropy_grad=case.entropy_grad,
            temperature=1.0,
        )

    return run


# The real scale: T=205,280 (slime #1951), H=4096, V=151,936 (Qwen2) at tp 8, chunk 1024.
REAL_SCALES = {
    "qwen-tp8-fp32": HiddenMemoryCase(rows=205_280, hidden_size=4096, vocab_local=151_936 // 8),
    "qwen-tp8-bf16": HiddenMemoryCase(rows=205_280, hidden_size=4096, vocab_local=151_936 // 8, dtype="bfloat16"),
    # Log-probs only: the same contract for targets without entropy (torch's linear_cross_entropy).
    "qwen-tp8-fp32-log-probs": HiddenMemoryCase(
        rows=205_280, hidden_size=4096, vocab_local=151_936 // 8, with_entropy=False
    ),
}
