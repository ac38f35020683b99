"""The order checks run in: cheap, high-yield checks first, so a failing target fails in seconds.

With ``-x`` (or a developer watching the first red line) the order decides how
long a broken target takes to report. The named regressions (``regressions/``)
and the memory checks of the ``budget`` tier (``properties/test_memory_bounds.py``,
``properties/test_hidden_memory.py``: the real scales run under fake tensors,
nothing allocated, seconds) catch the historic defects (a one_hot backward, a
full-size workspace, an extra saved copy) that the parity properties either
miss or find only after minutes. So the suite runs:

    0. the harness's own self-tests (``tests/``), where they were collected with the checks
    1. the fake-tensor memory checks: the one_hot regression, then the real-scale (not generated)
       tests of the logits memory file, then those of the hidden-state one (the slowest: a few
       hundred thousand fake operations each); in-process, no rank pool
    2. the other named regressions
    3. the generated-shape memory properties (real tensors, budget tier)
    4. the contract properties
    5. the hardening properties

Within a group the collected order is kept (a stable sort), so the order is
deterministic and a file's tests stay together. The tier of a check comes from
``harness.gate.tiers.tier_of_item``; an item whose tier cannot be read (the
plugin reports it as a usage error) keeps its place after the checks.
"""

from __future__ import annotations

from harness.gate.tiers import BUDGET, CONTRACT, HARDENING, SELF_TEST, is_named_regression, tier_of_item

MEMORY_FILES = ("properties/test_memory_bounds.py", "properties/test_hidden_memory.py")
# Within the fake-tensor group, cheapest first: the one_hot regression, the logits path, the hidden-state path.
FAKE_MEMORY_ORDER = ("regressions/test_one_hot_oom.py", *MEMORY_FILES)
# Named regressions that measure memory in-process under fake tensors (no rank pool): the cheapest checks there are.
FAKE_TENSOR_REGRESSIONS = ("regressions/test_one_hot_oom.py",)

SELF_TESTS, FAKE_MEMORY, REGRESSIONS, MEMORY, CONTRACTS, HARDENINGS, OTHER = range(7)
_TIER_GROUP = {BUDGET: MEMORY, CONTRACT: CONTRACTS, HARDENING: HARDENINGS, SELF_TEST: SELF_TESTS}


def _is_generated(item) -> bool:
    """A Hypothesis property (many examples, real tensors) rather than a fixed real-scale case."""
    function = getattr(item, "function", None)
    return bool(getattr(function, "is_hypothesis_test", False))


def group_of(item) -> int:
    """The group (above) an item runs in; lower runs first."""
    nodeid = item.nodeid
    path = nodeid.split("::", 1)[0]
    if path in FAKE_TENSOR_REGRESSIONS:
        return FAKE_MEMORY
    if is_named_regression(nodeid):
        return REGRESSIONS
    if path in MEMORY_FILES:
        return MEMORY if _is_generated(item) else FAKE_MEMORY
    try:
        tier = tier_of_item(item)
    except ValueError:
        return OTHER
    # A budget check outside the memory files is not known to be cheap: it runs with the contract properties.
    return CONTRACTS if tier == BUDGET else _TIER_GROUP.get(tier, OTHER)


def _sort_key(item) -> tuple[int, int]:
    group = group_of(item)
    path = item.nodeid.split("::", 1)[0]
    within = FAKE_MEMORY_ORDER.index(path) if group == FAKE_MEMORY and path in FAKE_MEMORY_ORDER else 0
    return group, within


def order_items(items):
    """``items`` sorted by group, the fake-tensor group by ``FAKE_MEMORY_ORDER`` (stable otherwise); a new list."""
    return sorted(items, key=_sort_key)
