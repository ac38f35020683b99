"""Regression for docs/bugs.md #5: the DSA training hang (slime #1822; again between fa3c990af and 6ad61127e).

DeepSeek Sparse Attention models use allgather CP. With the entropy computed
under no_grad, a sample lying wholly inside one CP rank's range left the other
rank with ``requires_grad=True`` zeros: backward then ran the all-reduce of
``torch.distributed.nn.all_reduce`` on some ranks only, and training hung
forever. Minimal known trigger: cp=2 allgather, total_lengths [8, 4],
response_lengths [6, 2], per-rank length 6, entropy_coef 0.

Checked for every generated CP case: the collectives of forward AND backward
(op, group, shape, dtype, phase) are identical on all ranks of each group,
and a real hang becomes a failure within seconds that names the stuck rank
and its last collective (harness/ranks/pool.py), never a stuck CI job.

Mutants: ``redistribute_zeros_require_grad`` (the #1788 mechanism),
``empty_cp_rank_skips_graph`` (a rank holding no rows returns graph-free
values, so only the other ranks all-reduce in backward) and
``tp_rank_without_targets_skips_stats_gather`` (a TP rank whose shard holds
no target skips the forward all-gather: the same class in forward, on TP).
"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.cases.strategies import cases
from harness.checks.cp import check_cp_collectives

pytestmark = pytest.mark.tier("contract")

CP_CASES = cases(cp_sizes=(2, 4), tp=st.sampled_from((1, 2)), cp_modes=("allgather", "allgather", "zigzag"))

# pad_multiple=3 gives cp * pad_multiple = 6 rows per rank, the per-rank length of the report.
KNOWN_TRIGGER = Case(seed=51, vocab=16, cp=2, cp_mode="allgather", samples=((8, 6), (4, 2)), pad_multiple=3)
# One rank holds only padding: it has no response row at all.
EMPTY_RANK = Case(seed=52, vocab=16, cp=2, cp_mode="allgather", samples=((4, 2),), pad_multiple=4)


@given(case=CP_CASES, coef=st.sampled_from((0.0, 0.01)))
@example(case=KNOWN_TRIGGER, coef=0.0)
@example(case=KNOWN_TRIGGER, coef=0.01)
@example(case=EMPTY_RANK, coef=0.01)
@example(case=EMPTY_RANK.with_(tp=2, vocab=16), coef=0.0)
def test_collectives_identical_across_ranks_forward_and_backward(case, coef, spec):
    check_cp_collectives(case.with_(entropy_coef=coef, with_entropy=True), spec)
