"""Topology invariance: the same rows give the same results on every TP degree, CP layout and chunk size.

Exact train/rollout agreement needs a row's log-prob, entropy and gradient
to be the same bits whether it was computed at TP 1 or 8, with or without
context parallelism, in a chunk of one row or of all of them, and whatever
other rows shared the call (docs/topology.md). A Case names its second
topology in ``extra["topology"]`` (``tp``, ``cp``, ``cp_mode``,
``chunk_size``), so a failure replays from its JSON alone; the check runs
the packed path on both topologies, gathers every sample's values from the
CP ranks' zigzag views and the GLOBAL logits gradient from the TP shards
and CP rows, and compares.

Tiers (docs/gate.md): for a target declaring ``topology_invariant`` (impl's
torch backend) the comparison is bit for bit and contract; for any other
target the contract is that both topologies are within the tolerance policy
of the float64 oracle (a TP-degree-dependent error beyond it is a defect),
and bit-identity is hardening (``exact=True``).
"""

from __future__ import annotations

from harness.cases.case import Case
from harness.cases.topology import other_topology, without_topology
from harness.checks.parity import (
    assemble_grad,
    assert_packed_backward,
    assert_packed_forward,
    gather_samples,
    replayable,
    require,
    required_capabilities,
)
from harness.checks.tolerance import assert_identical
from harness.jobs.logits import packed_job
from harness.ranks.run import run_job
from harness.targets import load_target

TOPOLOGY_INVARIANT = "topology_invariant"


def _exact(spec: str, exact: bool | None) -> bool:
    return TOPOLOGY_INVARIANT in load_target(spec).capabilities if exact is None else exact


@replayable
def check_topology_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Packed path: the Case's topology and ``extra["topology"]`` give the same values and global gradient."""
    first = without_topology(case)
    second = other_topology(case)
    for each in (first, second):
        require(spec, required_capabilities(each, "packed"))
    results = [run_job(packed_job, each, spec) for each in (first, second)]
    label = (
        f"tp={first.tp} cp={first.cp}/{first.cp_mode} chunk={first.chunk_size} vs "
        f"tp={second.tp} cp={second.cp}/{second.cp_mode} chunk={second.chunk_size}"
    )
    if not _exact(spec, exact):
        for each, result in zip((first, second), results):
            assert_packed_forward(each, result)
            assert_packed_backward(each, result)
        return
    for key in ("log_probs", "entropy") if case.with_entropy else ("log_probs",):
        values = [gather_samples(each, result, key) for each, result in zip((first, second), results)]
        for i, (x, y) in enumerate(zip(*values)):
            assert_identical(y, x, what=f"{key}[sample {i}], {label}")
    grads = [assemble_grad(each, result) for each, result in zip((first, second), results)]
    assert_identical(grads[1], grads[0], what=f"grad(logits), {label}")


__all__ = ["TOPOLOGY_INVARIANT", "check_topology_invariance"]
