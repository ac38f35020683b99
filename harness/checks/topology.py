"""Topology invariance: the same rows give the same results on every TP degree, CP layout and chunk size.

Exact train/rollout agreement needs a row's log-prob, entropy and gradient
to be the same bits whether it was computed at TP 1 or 8, with or without
context parallelism, in a chunk of one row or of all of them, and whatever
other rows shared the call (docs/topology.md). A Case names its second
topology in ``extra["topology"]`` (``tp``, ``cp``, ``cp_mode``,
``chunk_size``), so a failure replays from its JSON alone; the check runs
the packed path (or, at cp=1, the token level) on both topologies, gathers
every sample's values from the CP ranks' zigzag views and the GLOBAL logits
gradient from the TP shards and CP rows, and compares.

Tiers (docs/gate.md): for a target declaring ``topology_invariant`` (impl's
torch backend) the comparison is bit for bit and contract; for any other
target the contract is that both topologies are within the tolerance policy
of the float64 oracle (a TP-degree-dependent error beyond it is a defect),
and bit-identity is hardening (``exact=True``).
"""

from __future__ import annotations

import torch

from harness.cases.case import Case
from harness.cases.hidden import prefix_rows
from harness.cases.topology import other_topology, without_topology
from harness.checks import judge
from harness.checks.failure import GRADIENT, VALUE
from harness.checks.hidden import KEY_OUTPUTS, assert_hidden_backward, assert_hidden_forward, hidden_capabilities
from harness.checks.invariances import LEVELS
from harness.checks.parity import (
    assemble_grad,
    gather_samples,
    replayable,
    replicated,
    require,
    required_capabilities,
    run_ranks,
)
from harness.checks.subtests import GRAD_LOGITS, GRAD_WEIGHT, subtest
from harness.jobs.hidden import hidden_job
from harness.targets import load_target

TOPOLOGY_INVARIANT = "topology_invariant"


def _exact(spec: str, exact: bool | None) -> bool:
    return TOPOLOGY_INVARIANT in load_target(spec).capabilities if exact is None else exact


def _values(level: str, case: Case, results: list, key: str) -> list:
    """Per-sample values (packed: gathered from the CP ranks' views) or the one row vector (token level)."""
    return gather_samples(case, results, key) if level == "packed" else [replicated(results, key)]


def _label(first: Case, second: Case) -> str:
    def one(c: Case) -> str:
        prefix = prefix_rows(c)
        return f"tp={c.tp} cp={c.cp}/{c.cp_mode} chunk={c.chunk_size}" + (
            f" after {prefix} other rows" if prefix else ""
        )

    return f"{one(first)} vs {one(second)}"


def _topology_invariance(case: Case, spec: str, exact: bool | None, level: str) -> None:
    job, forward, backward = LEVELS[level]
    first, second = without_topology(case), other_topology(case)
    if prefix_rows(second):
        raise ValueError("prefix_rows is a hidden-state topology (check_hidden_topology_invariance)")
    for each in (first, second):
        require(spec, required_capabilities(each, level))
    results = [run_ranks(job, each, spec) for each in (first, second)]
    if not _exact(spec, exact):
        for each, result in zip((first, second), results):
            forward(each, result)
            backward(each, result)
        return
    label = _label(first, second)
    for key in ("log_probs", "entropy") if case.with_entropy else ("log_probs",):
        with subtest(key):
            values = [_values(level, each, result, key) for each, result in zip((first, second), results)]
            for i, (x, y) in enumerate(zip(*values)):
                judge.identical(y, x, what=f"{key}[{i}], {label}")
    with subtest(GRAD_LOGITS):
        grads = [assemble_grad(each, result) for each, result in zip((first, second), results)]
        judge.identical(grads[1], grads[0], what=f"grad(logits), {label}", kind=GRADIENT)


@replayable
def check_topology_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Packed path: the Case's topology and ``extra["topology"]`` give the same values and global gradient."""
    _topology_invariance(case, spec, exact, "packed")


@replayable
def check_token_topology_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Token level (cp=1): another TP degree or chunk size gives the same values and global gradient."""
    _topology_invariance(case, spec, exact, "token")


@replayable
def check_hidden_topology_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Hidden-state path: another TP degree, chunk size, or other rows before the Case's, the same results.

    Values and grad(hidden) are compared row by row; grad(weight), a sum
    over the call's rows, only where both calls hold the same rows (no
    ``prefix_rows``). Within the tolerance policy of the oracle for a
    target without ``topology_invariant``.
    """
    first, second = without_topology(case), other_topology(case)
    for each in (first, second):
        require(spec, hidden_capabilities(each))
    results = [run_ranks(hidden_job, each, spec) for each in (first, second)]
    same_rows = not prefix_rows(second)
    if not _exact(spec, exact):
        for each, result in zip((first, second), results):
            assert_hidden_forward(each, result)
            assert_hidden_backward(each, result, weight_grad=not prefix_rows(each))
        return
    label = _label(first, second)
    keys = ("log_probs", "entropy", "grad_hidden") if case.with_entropy else ("log_probs", "grad_hidden")
    for key in keys:
        with subtest(KEY_OUTPUTS[key]):
            kind = GRADIENT if key.startswith("grad") else VALUE
            values = [replicated(result, key, kind=kind) for result in results]
            judge.identical(values[1], values[0], what=f"{key}, {label}", kind=kind)
    if same_rows:
        with subtest(GRAD_WEIGHT):
            weights = [torch.cat([r["grad_weight"] for r in result]) for result in results]
            judge.identical(weights[1], weights[0], what=f"grad(weight), {label}", kind=GRADIENT)


__all__ = [
    "TOPOLOGY_INVARIANT",
    "check_hidden_topology_invariance",
    "check_token_topology_invariance",
    "check_topology_invariance",
]
