"""The harness: cases -> ranks -> jobs -> checks -> verdicts, targets (adapters), the gate and mutants.

Importing it first installs the mutant named by ``LPH_MUTANT`` (if any), so
that every process, the test process and each spawned rank alike, imports the
mutated ``impl`` (see harness/mutants/loader.py), and asks MKL for strict
conditional numerical reproducibility (``MKL_CBWR``, unless the caller chose
a mode): without it MKL's small fp32 GEMM kernels give a row other last bits
depending on the operands' alignment and on what the process computed
before, and the hidden-state path's bit-for-bit promise (docs/topology.md)
would hold only in a fresh process. MKL reads it at its first call, so it
must be set before any matmul runs.
"""

import os
from pathlib import Path

os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

from harness.mutants.loader import install_from_env

# The repository root: where pytest, the gate and the mutant runner run their subprocesses.
ROOT = Path(__file__).resolve().parents[1]

install_from_env()
