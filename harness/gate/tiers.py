"""Tiers: every check belongs to exactly one, so a gate can weigh failures differently.

* ``contract``: values and gradients against the oracle on finite inputs within
  the tolerance policy, the entropy-gradient gate, inputs never written,
  collective consistency and hangs, and the five named regressions. A
  failure here is a wrong answer (or a stuck job) in a trainer.
* ``budget``: this project's resource bounds (docs/design.md memory bounds), what a
  trainer may reasonably choose differently.
* ``hardening``: special values (-inf columns, huge logits, ties), the
  bad-input tables, and bit-exactness a target does not promise.

A check declares its tier with ``@pytest.mark.tier("...")`` (or a module's
``pytestmark``); the plugin refuses a check under properties/ or
regressions/ with no tier or with two. The placement of every check, and why,
is in docs/gate.md.
"""

from __future__ import annotations

CONTRACT, BUDGET, HARDENING = "contract", "budget", "hardening"
TIERS = (CONTRACT, BUDGET, HARDENING)
MARKER = "tier"
CHECK_DIRECTORIES = ("properties", "regressions")
REGRESSION_DIRECTORY = "regressions"
SELF_TEST = "self-test"


def parse_tiers(text: str) -> tuple[str, ...]:
    """``"contract,budget"`` -> ("contract", "budget"); an unknown name is a clear error."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = sorted(set(names) - set(TIERS))
    if unknown or not names:
        raise ValueError(f"--tiers {text!r}: unknown tier(s) {unknown or '(none given)'}; choose from {list(TIERS)}")
    return names


def is_check(nodeid: str) -> bool:
    """Checks live under properties/ and regressions/; tests/ holds the harness's own self-tests."""
    return nodeid.split("/", 1)[0] in CHECK_DIRECTORIES


def is_named_regression(nodeid: str) -> bool:
    return nodeid.startswith(REGRESSION_DIRECTORY + "/")


def tier_of_item(item) -> str:
    """The one tier a collected pytest item declares; a clear error for none or several."""
    marks = list(item.iter_markers(MARKER))
    names = {mark.args[0] if mark.args else None for mark in marks}
    if not is_check(item.nodeid):
        return SELF_TEST if not names else _only(item.nodeid, names)
    if not marks:
        raise ValueError(
            f"{item.nodeid}: every check needs exactly one tier; add @pytest.mark.tier(...) with one of {list(TIERS)}"
        )
    return _only(item.nodeid, names)


def _only(nodeid: str, names: set) -> str:
    if len(names) != 1 or next(iter(names)) not in TIERS:
        raise ValueError(f"{nodeid}: tier marker(s) {sorted(map(str, names))}: give exactly one of {list(TIERS)}")
    return next(iter(names))
