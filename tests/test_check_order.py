"""The run order: the checks that catch a one_hot backward in seconds run before the slow fake-tensor ones.

``harness.gate.order`` puts the fake-tensor memory checks first; within them
the hidden-state path's real scales cost tens of seconds each, so they must
come after the one_hot regression and the logits path's real scales, or a
target with a one_hot backward waits for them before its first red line.
"""

import subprocess
import sys

from harness import ROOT


def test_one_hot_regression_and_logits_memory_run_before_the_hidden_real_scales():
    files = ["properties/test_hidden_memory.py", "properties/test_memory_bounds.py", "regressions/test_one_hot_oom.py"]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    order = [line.split("::", 1)[0] for line in out.splitlines() if "::" in line]
    first = {path: order.index(path) for path in files}
    assert first["regressions/test_one_hot_oom.py"] < first["properties/test_memory_bounds.py"], order
    assert first["properties/test_memory_bounds.py"] < first["properties/test_hidden_memory.py"], order
