"""The harness: cases -> ranks -> jobs -> checks -> verdicts, targets (adapters), the gate and mutants.

Importing it first installs the mutant named by ``LPH_MUTANT`` (if any), so
that every process, the test process and each spawned rank alike, imports the
mutated ``impl`` (see harness/mutants/loader.py).
"""

from pathlib import Path

from harness.mutants.loader import install_from_env

# The repository root: where pytest, the gate and the mutant runner run their subprocesses.
ROOT = Path(__file__).resolve().parents[1]

install_from_env()
