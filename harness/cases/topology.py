"""A Case and a second topology of the same rows, for the topology-invariance check.

The second topology rides in ``extra["topology"]`` so a failing pair
replays from the Case's JSON alone. The rows, values, targets and options
are the Case's own (they depend on the seed, the vocabulary and the
samples, never on tp/cp); only how they are laid out and chunked changes,
and, on the hidden-state path, which other rows precede them in the call
(``prefix_rows``).
"""

from __future__ import annotations

from harness.cases.case import Case

TOPOLOGY = "topology"
TOPOLOGY_FIELDS = ("tp", "cp", "cp_mode", "chunk_size", "prefix_rows")
# Not a Case field: the hidden-state job's rows of other tokens before the Case's (harness.cases.hidden).
_EXTRA_FIELDS = ("prefix_rows",)


def with_topology(case: Case, **topology) -> Case:
    """``case`` carrying a second topology (some of ``TOPOLOGY_FIELDS``) to compare with."""
    unknown = set(topology) - set(TOPOLOGY_FIELDS)
    if unknown:
        raise ValueError(f"topology: unknown field(s) {sorted(unknown)}; give some of {list(TOPOLOGY_FIELDS)}")
    other = other_topology(case.with_(extra={**case.extra, TOPOLOGY: dict(topology)}))
    if other.qkv_format != case.qkv_format:
        raise ValueError("topology: context parallelism needs qkv_format='thd' on both sides (the rows must match)")
    return case.with_(extra={**case.extra, TOPOLOGY: dict(topology)})


def without_topology(case: Case) -> Case:
    """The Case's own topology (``extra`` without the second one)."""
    return case.with_(extra={key: value for key, value in case.extra.items() if key != TOPOLOGY})


def other_topology(case: Case) -> Case:
    """The same rows on the topology named in ``extra["topology"]`` (a Case, validated as any other)."""
    if TOPOLOGY not in case.extra:
        raise ValueError("the Case names no second topology: build it with harness.cases.topology.with_topology")
    changes = {"tp": case.tp, "cp": case.cp, "cp_mode": case.cp_mode, "chunk_size": case.chunk_size}
    changes.update(case.extra[TOPOLOGY])
    if changes["cp"] > 1:
        changes["qkv_format"] = "thd"
    extra = {field: changes.pop(field) for field in _EXTRA_FIELDS if field in changes}
    other = without_topology(case)
    return other.with_(extra={**other.extra, **extra}, **changes)
