"""``python -m harness.mutants [NAME ...]``: run the mutant check (see runner.py)."""

import sys

from harness.mutants.runner import main

sys.exit(main())
