"""``max_hidden_rows``: an example above a target's declared bound is UNSUPPORTED with the bound named.

Liger's fused kernel under Triton's CPU interpreter and TRL's torch twins of its
kernels cost milliseconds per row, so the grad(weight) check over a thousand row
blocks would take a quarter of an hour per call there; the bound leaves those
examples out, and the verdict says so rather than passing on examples never run.
"""

import pytest

from harness.cases import limits as case_limits
from harness.cases.case import Case
from harness.checks.parity import require_rows_within_limits
from harness.targets.protocol import Target


class _Path(Target):
    capabilities = frozenset({"hidden"})

    def __init__(self, limits=None):
        self.name, self.case_limits = "stand-in", limits


def test_an_example_above_the_bound_is_unsupported_naming_it():
    case = Case(seed=0, vocab=4, tp=1, samples=((300, 2),))
    case_limits.activate({"max_hidden_rows": 256})
    try:
        with pytest.raises(pytest.skip.Exception, match=r"UNSUPPORTED.*more than 256 rows per call"):
            require_rows_within_limits("impl", case)
        require_rows_within_limits("impl", case.with_(samples=((256, 2),)))  # at the bound: runs
        case_limits.activate(None)
        require_rows_within_limits("impl", case)  # no bound: runs
    finally:
        case_limits.activate(None)
