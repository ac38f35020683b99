"""Run a rank-side job for a Case on every rank of its layout.

Every distributed job's collective traces are compared across the ranks of
each group (the universal property of docs/design.md); a mismatch fails the check
even when the mismatched collectives happened not to hang.

World size 1 runs in this process (no process group: nothing can hang and
nothing needs isolating), larger worlds go through the persistent rank pool
of their size. Either way the caller gets one result per global rank, in rank
order, and a hung or failing rank surfaces as an exception naming it.

A pool job's deadline comes from ``harness.ranks.deadline`` (a multiple of the
measured cost of the same job shape, floored and capped) unless the caller
passes one; a hang is memoised per test and bounds shrinking
(``harness.ranks.hang_memo``), so one hang-class bug costs seconds, not minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.cases import stats
from harness.cases.case import Case
from harness.names import name_of
from harness.ranks import deadline, hang_memo, rank_warnings
from harness.ranks.errors import CollectivesDiffer
from harness.ranks.pool import RankContext, RankHang, get_pool
from harness.ranks.process import layout_groups
from harness.ranks.trace import compare_traces


def _local_context() -> RankContext:
    return RankContext(
        rank=0, world_size=1, tp=1, cp=1, tp_rank=0, cp_rank=0, tp_group=None, cp_group=None, tracer=None
    )


def run_job(
    job: Callable,
    case: Case,
    spec: str = "impl",
    *,
    timeout_s: float | None = None,
    compare_traces: bool = True,
    **options,
) -> list:
    """Run the rank-side function ``job`` for ``case`` against ``target``; one result per rank.

    ``compare_traces=False`` leaves the trace comparison to the caller (a check
    that wants to report a more specific symptom first). ``timeout_s`` fixes
    the deadline (self-tests); by default the deadline policy sizes it.
    """
    stats.record(case)
    payload = {"case": case.to_json(), "spec": spec, **options}
    if case.world_size == 1:
        with rank_warnings.capture() as caught:
            try:
                result = job(payload, _local_context())
            finally:
                rank_warnings.note(0, rank_warnings.summary(caught))
        rank_warnings.reemit(caught)
        return [result]
    results = run_pool_job(name_of(job), payload, case, timeout_s)
    if compare_traces:
        assert_collectives_consistent(case, results)
    return results


def run_pool_job(job: str, payload: dict, case: Case, timeout_s: float | None = None) -> list:
    """One job through the pool under the deadline policy and the per-test hang memo."""
    key = hang_memo.memo_key(job, payload)
    memo = hang_memo.current()
    memo.before_run(key)
    pool = get_pool(case.world_size)
    pool.start()  # a (re)spawn is not part of the job's cost
    shape = deadline.shape_of(job, case.tp, case.cp, case.rows, case.vocab)
    limit = deadline.POLICY.deadline(shape) if timeout_s is None else timeout_s
    warm, started = pool.jobs_run > 0, time.monotonic()
    hung = None
    try:
        results = pool.run(job, payload, tp=case.tp, cp=case.cp, timeout_s=limit)
    except RankHang as hang:
        hung = hang
    if hung is not None:
        # Raised outside the except block: a memo hit has no exception context either, and Hypothesis
        # compares the whole chain (a different chain on the final replay would read as Flaky).
        memo.record(key, hung)
        hang_memo.raise_hang(type(hung), str(hung), diverged=hung.diverged)
    if warm:  # a cold pool's first job pays the ranks' imports: not the shape's cost
        deadline.POLICY.observe(shape, time.monotonic() - started)
    return results


def assert_collectives_consistent(case: Case, results: list) -> None:
    """Universal property (docs/bugs.md #5): all ranks of each TP and CP group issued the same collectives."""
    traces = {
        rank: result["trace"] for rank, result in enumerate(results) if isinstance(result, dict) and "trace" in result
    }
    if len(traces) < 2:
        return
    tp_groups, cp_groups = layout_groups(case.world_size, case.tp, case.cp)
    problems = compare_traces(traces, tp_groups + cp_groups)
    if problems:
        raise CollectivesDiffer("collective sequences differ across ranks (a hang in waiting):\n" + "\n".join(problems))
