"""Peak memory of sampling replay at real scale: a target's kept-set path against a dense keep-mask path.

docs/sampling.md: ``K`` arrives as CSR (``k`` ids per row), so replay needs
``O(rows * k)`` beyond the logits and their gradient. A trainer that first
expands it into a bool ``[rows, V_local]`` keep mask and a masked copy of the
logits, as slime does (``_build_topp_keep_mask``, then
``logits.masked_fill(~keep, -inf)`` before its vocab-parallel softmax), pays
``rows * V_local`` bytes twice or more. Both are measured here with the
live-storage tracker under fake tensors (nothing is allocated), at the
historic scales of docs/bugs.md #3 (slime #1951: 205,280 rows, V = 76,032).

The dense path is measured in slime's manner with the target's own
full-vocabulary Function doing the softmax (``token_log_probs`` on the masked
copy): the keep mask, its complement and the masked copy are what the dense
form adds, whatever softmax follows. It is a lower bound on slime's own peak.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.memory.logits import HISTORIC_SCALES, ROW_ALLOWANCE_BYTES, MemoryCase, MemoryReport, chunk_working_set
from harness.memory.tracker import LiveStorageTracker, fake_mode
from harness.targets import KeptSet

# What a kept entry may cost beyond the inputs: its row and column ids and the
# sort that makes K a set (a dozen int64/fp32 vectors of nnz entries at most).
ENTRY_ALLOWANCE_BYTES = 96


@dataclass(frozen=True)
class SamplingMemoryCase:
    """A memory problem plus ``kept_per_row`` ids per row in the CSR (all on this rank's shard)."""

    case: MemoryCase
    kept_per_row: int

    @property
    def entries(self) -> int:
        return self.case.rows * self.kept_per_row

    def bound(self) -> int:
        """The logits, their gradient, a chunk of the full-vocabulary budget's working set, and O(nnz)."""
        case = self.case
        return (
            2 * case.unit
            + chunk_working_set(case.chunk_rows, case.vocab_local)
            + case.rows * ROW_ALLOWANCE_BYTES
            + self.entries * ENTRY_ALLOWANCE_BYTES
        )


# top-k 50 (a common rollout setting) at slime #1951's scale, TP 1 and TP 8.
SAMPLING_SCALES = {
    f"{name}-k50": SamplingMemoryCase(HISTORIC_SCALES[name], 50) for name in ("slime-1951-tp1", "slime-1951-tp8")
}


def _call(target, logits, targets, kept: KeptSet, case: MemoryCase):
    return target.sampling_log_probs(
        logits,
        targets,
        kept,
        tp_group=None,
        chunk_size=case.chunk_size,
        with_entropy=case.with_entropy,
        entropy_grad=case.entropy_grad,
        temperature=1.0,
        on_outside="force_keep",
    )


def _dense_mask_path(target, logits, targets, kept: KeptSet, case: MemoryCase):
    """slime's form: a bool keep mask built from the CSR, the logits masked into a copy, the full softmax over it."""
    rows = torch.arange(case.rows).repeat_interleave(
        kept.offsets[1:] - kept.offsets[:-1], output_size=kept.ids.shape[0]
    )
    keep = torch.zeros(case.rows, case.vocab_local, dtype=torch.bool)
    keep[rows, kept.ids] = True
    masked = logits.masked_fill(~keep, float("-inf"))
    return target.token_log_probs(
        masked,
        targets,
        tp_group=None,
        chunk_size=case.chunk_size,
        with_entropy=case.with_entropy,
        entropy_grad=case.entropy_grad,
        temperature=1.0,
    )


def measure_sampling_memory(problem: SamplingMemoryCase, target, *, dense_mask: bool = False) -> MemoryReport:
    """Peak live bytes of forward + ``sum()`` backward over the kept set, under fake tensors.

    ``dense_mask=False``: the target's ``sampling_log_probs`` with the CSR;
    ``True``: the dense keep-mask path above (the target's ``token_log_probs``).
    """
    case = problem.case
    with fake_mode():
        logits = torch.zeros(case.rows, case.vocab_local, dtype=case.torch_dtype, requires_grad=True)
        targets = torch.zeros(case.rows, dtype=torch.long)
        kept = KeptSet(
            ids=torch.zeros(problem.entries, dtype=torch.long),
            offsets=torch.arange(case.rows + 1, dtype=torch.long) * problem.kept_per_row,
        )
        tracker = LiveStorageTracker().track(logits, targets, kept.ids, kept.offsets)
        with tracker:
            run = _dense_mask_path if dense_mask else _call
            log_probs, entropy = run(target, logits, targets, kept, case)
            loss = log_probs.sum()
            if entropy is not None and entropy.requires_grad:
                loss = loss + entropy.sum()
            loss.backward()
            del log_probs, entropy, loss
        return MemoryReport(case, tracker.peak, tracker.allocations)


def vocab_sized(allocations: list, case: MemoryCase) -> list:
    """Allocations (inputs excluded) with a ``rows x V_local`` shape: masks, masked copies, gradients."""
    wanted = (case.rows, case.vocab_local)
    # data-dependent sizes (the kept entries) are symbolic under fake tensors: never vocabulary-shaped
    concrete = [a for a in allocations if a.op != "input" and all(isinstance(d, int) for d in a.shape)]
    return [a for a in concrete if a.shape == wanted]
