"""Named hazard: the kept set derived per TP shard instead of over the whole row.

Top-k needs the row's global k-th value; with the vocabulary sharded over TP a
rule applied to each shard keeps every shard's own k best, a larger set that
depends on the TP size (docs/sampling.md, "Tensor parallelism": top-1 of
``[5, 4, 3, 2 | 1, 0, -1, -2]`` per shard keeps ``{0, 4}``, globally ``{0}``).
The trainer then renormalises over a set the engine never used. Derived top-k
(alone, and followed by top-p, which renormalises over top-k's survivors) at
TP 2 and 4 against the oracle's global rule.

Mutant: ``sampling_top_k_per_shard``.
"""

import pytest

from harness.cases.case import Case
from harness.cases.sampling import sampling_case
from harness.checks.sampling import check_sampling
from harness.targets import load_target

pytestmark = pytest.mark.tier("contract")

CASE = Case(seed=25, vocab=16, samples=((6, 4),), logit_scale=3.0)


def _case(spec, **changes) -> Case:
    """CASE for this target: the entropy over K rides along where the target has it (the hazard is the log-prob)."""
    return CASE.with_(with_entropy="sampling_entropy" in load_target(spec).capabilities, **changes)


@pytest.mark.parametrize("tp", (2, 4))
@pytest.mark.parametrize("top_k", (1, 3))
def test_top_k_is_a_global_rule(tp, top_k, spec):
    check_sampling(sampling_case(_case(spec, tp=tp), kept="derived", form="derived", top_k=top_k), spec)


def test_top_p_after_a_global_top_k(spec):
    check_sampling(sampling_case(_case(spec, tp=2), kept="derived", form="derived", top_k=3, top_p=0.7), spec)
