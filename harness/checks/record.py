"""What one running test observed besides pass/fail: figures, examples left out, a failure's evidence.

A budget check asserts a bound, but a gate comparing a pull request with its
base also needs the figure itself: a PR that takes a 3x-logits peak to 4x is
worse even though both exceed the 2x bound. And a property that rejects the
examples its target cannot run (``require``) must say how many it left out
and why, so a narrow target never reads as a full pass. A failing check
leaves its evidence here too: which conditions the failure needs (the
ablation's ``diagnosis``) and the ``warnings`` the ranks raised meanwhile.

The pytest plugin creates one ``TestRecord`` per test item (kept in the
item's stash) and makes it current for that test (``use``); checks write to
``current()``. Outside pytest (replay, bench) one record serves the process.
"""

from __future__ import annotations

from collections import Counter
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

PEAK_OVER_LOGITS = "peak_over_logits"


@dataclass
class TestRecord:
    # name -> {"value": float, "case": str}; the last record of a name wins.
    figures: dict[str, dict] = field(default_factory=dict)
    # (target name, missing capabilities) -> examples rejected for them.
    unsupported: Counter = field(default_factory=Counter)
    # The last failure's ablation result (``harness.checks.diagnosis.Diagnosis.as_dict``), None if none ran.
    diagnosis: dict | None = None
    # The warnings the ranks raised during the last failing check call, one entry per distinct message
    # (``harness.ranks.rank_warnings.merged``).
    warnings: list = field(default_factory=list)
    # Every failure of this test was over the tolerance bound only by what rounding in the Case's dtype explains
    # (``harness.checks.tolerance.PrecisionOnly``): a precision verdict for the hardening tier, not a contract FAIL.
    # None: no failure was seen; False as soon as one failure was more than that (Hypothesis may report several).
    precision_only: bool | None = None
    # The outputs some check run of this test judged and passed (harness.checks.subtests): with the failures
    # the test raised, the per-output verdict. A pass here is overridden by a failure of the same output.
    passed_outputs: set = field(default_factory=set)

    __test__ = False  # not a pytest test class, despite its name


_CURRENT: ContextVar[TestRecord | None] = ContextVar("lph_test_record", default=None)


def current() -> TestRecord:
    record = _CURRENT.get()
    if record is None:
        record = TestRecord()
        _CURRENT.set(record)
    return record


def use(record: TestRecord) -> Token:
    """Make ``record`` the running test's record (the plugin calls this before each test)."""
    return _CURRENT.set(record)


def figure(name: str, value: float, case: object) -> None:
    """Record ``value`` measured on ``case`` under ``name`` for the running test.

    ``case`` is kept as text: two runs' figures are comparable only when they
    were measured on the same case (a generated property's shrunk examples
    may differ between a base and a PR).
    """
    current().figures[name] = {"value": float(value), "case": str(case)}
