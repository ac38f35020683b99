"""Does a mutated operation change any bits on THIS machine? Asked before a mutant whose effect a BLAS decides.

Most mutants change arithmetic that IEEE rules fix (an addition order, a
missing term): they are detectable on every machine. A few change only
which kernel a library picks, and whether that changes a result's bits is a
property of the CPU and its BLAS, not of the harness: on this project's AMD
EPYC, MKL gives a GEMM of ``n`` output columns other last bits than the same
columns inside a 256-column GEMM, while on an Intel Xeon the topology
property passed with the unpadded block in place: the mutant check was red
there for a reason that is not a harness defect. Such a mutant names a probe: the probe runs the mutated and
the original operation side by side on the shapes its property draws, and a
machine where no shape differs reports the mutant EQUIVALENT HERE, with the
probe's figure, instead of running it (harness/mutants/runner.py).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from impl.fixed_gemm import MATMUL_BLOCK_ROWS


@dataclass(frozen=True)
class ProbeResult:
    """``differing`` of ``tried`` shapes gave other bits under the mutated operation."""

    differing: int
    tried: int
    operation: str

    @property
    def detectable(self) -> bool:
        return self.differing > 0

    def __str__(self) -> str:
        return f"{self.operation}: {self.differing} of {self.tried} shapes give other bits on this machine"


# The shapes the hidden topology pairs draw (harness/cases/hidden_strategies.py: H 1 to 24, tiny vocabularies,
# row blocks cut anywhere) plus a wide leaf (impl.fixed_gemm.WIDE_LEAF), in the three dtypes.
_HIDDEN_SIZES = (1, 2, 3, 5, 7, 13, 24)
_LEAF_WIDTHS = (1, 3, 5, 12, 256)
_ROWS = (1, 2, 3, 5, 12, 40, 255)
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def last_block_rows() -> ProbeResult:
    """A row block's logits from a GEMM at the block's own row count vs from the zero-padded 256-row block.

    The mutated operation of ``hidden_last_block_unpadded`` (``impl.fixed_gemm.FixedShapeGemm._rows``): the
    rows are the GEMM's output columns, ``W [width, H] @ h.T``; padding adds zero columns only, so any
    difference is the kernel's choice of summation order for ``n`` columns.
    """
    generator = torch.Generator().manual_seed(0)
    differing = tried = 0
    threads = torch.get_num_threads()
    shapes = itertools.product(_HIDDEN_SIZES, _LEAF_WIDTHS, _ROWS, _DTYPES)
    try:
        for (hidden_size, width, rows, dtype), ranks_threads in itertools.product(shapes, sorted({1, threads})):
            # Rank processes run one thread (OMP_NUM_THREADS=1); a one-rank pair runs in the test process.
            torch.set_num_threads(ranks_threads)
            weight = torch.randn(width, hidden_size, generator=generator).to(dtype)
            block = torch.zeros(MATMUL_BLOCK_ROWS, hidden_size, dtype=dtype)
            block[:rows] = torch.randn(rows, hidden_size, generator=generator).to(dtype)
            padded = torch.mm(weight, block.t())[:, :rows]
            own = torch.mm(weight, block[:rows].t())
            differing += not torch.equal(padded, own)
            tried += 1
    finally:
        torch.set_num_threads(threads)
    return ProbeResult(differing, tried, "GEMM over a block's own rows vs the padded 256-row block")
