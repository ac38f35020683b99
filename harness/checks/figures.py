"""Figures a check measures (peak bytes over logits bytes, ...), carried into its verdict.

A budget check asserts a bound, but a gate comparing a pull request with its
base also needs the figure itself: a PR that takes a 3x-logits peak to 4x is
worse even though both exceed the 2x bound. A check records its figure here
before asserting; the pytest plugin resets the record before each test and
copies it into the test's report (a ``figures`` user property, which
crosses pytest-xdist workers) and from there into ``verdicts.json``.
"""

from __future__ import annotations

PEAK_OVER_LOGITS = "peak_over_logits"

_FIGURES: dict[str, dict] = {}


def record(name: str, value: float, case: object) -> None:
    """Record ``value`` measured on ``case`` under ``name`` for the running test (the last record wins).

    ``case`` is kept as text: two runs' figures are comparable only when they
    were measured on the same case (a generated property's shrunk examples
    may differ between a base and a PR).
    """
    _FIGURES[name] = {"value": float(value), "case": str(case)}


def recorded() -> dict[str, dict]:
    return {name: dict(entry) for name, entry in _FIGURES.items()}


def reset() -> None:
    _FIGURES.clear()
