"""Context parallelism across ranks: the gate's flags (bug 4) and the collectives (bug 5, the hang class).

Both compare what every rank did (``requires_grad`` flags, collective
traces) rather than a value against the oracle, and both run on the policy
path, where slime's allgather-CP re-grad and the DSA hang shipped.
"""

from __future__ import annotations

from harness.cases.case import Case
from harness.checks.failure import GRAPH, ensure
from harness.checks.parity import (
    assert_entropy_gate,
    entropy_gate,
    replayable,
    require,
    required_capabilities,
    run_ranks,
)
from harness.checks.subtests import GRAPH_FLAGS, subtest
from harness.jobs.logits import packed_job, policy_job


@replayable
def check_cp_requires_grad(case: Case, spec: str = "impl") -> None:
    """Bug 4: on every CP rank, ``requires_grad`` of each returned tensor equals the gate.

    The flags are gathered from all ranks and compared; a rank that holds none
    of a sample must not turn the gradient back on (slime #2123).
    """
    require(spec, required_capabilities(case, "policy_loss"))
    # Forward only: the flags are the bug; the backward hang they cause is test_dsa_hang's.
    results = run_ranks(policy_job, case, spec, backward=False)
    flags = {rank: (r["log_probs_requires_grad"], r["entropy_requires_grad"]) for rank, r in enumerate(results)}
    with subtest(GRAPH_FLAGS):
        ensure(len({repr(f) for f in flags.values()}) == 1, GRAPH, f"requires_grad differs across ranks: {flags}")
    assert_entropy_gate(case, results, spec)


@replayable
def check_cp_collectives(case: Case, spec: str = "impl") -> None:
    """Bug 5: forward AND backward issue the same collectives on every rank of each group.

    ``run_ranks`` judges the traces (output ``collectives``); the deadline policy
    (harness/ranks/deadline.py, the same for every check) turns a real hang into
    a failure naming the stuck rank and its last collective within seconds.
    """
    require(spec, required_capabilities(case, "policy_loss"))
    run_ranks(policy_job, case, spec)
    run_ranks(packed_job, case, spec, entropy_grad=entropy_gate(case))
