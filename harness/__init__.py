"""The harness: cases, rank pool, trace, tolerance, references, targets, checks, mutants.

Importing it first installs the mutant named by ``LPH_MUTANT`` (if any), so
that every process, the test process and each spawned rank alike, imports the
mutated ``impl`` (see harness/mutants/loader.py).
"""

from harness.mutants.loader import install_from_env

install_from_env()
