"""``python -m harness.gate``: see harness/gate/runner.py."""

import sys

from harness.gate.runner import main

sys.exit(main())
