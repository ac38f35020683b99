"""Named hazard: normalising over the full vocabulary while the rollout normalised over the kept set.

The engine samples from ``softmax(z)`` renormalised over ``K`` (top-k / top-p /
min-p); a trainer that recomputes ``log p`` over every column gets
``log p~ + log S`` with ``S`` the kept mass (docs/sampling.md, "Why replay"),
so every importance ratio is off by a different factor at every token. The
values are plausible and finite: only a comparison with the processed
distribution shows it. Given ``K`` as CSR and as dense shards, at TP 1 and 2,
and the entropy over ``K`` with it.

Mutant: ``sampling_full_vocab_normaliser``.
"""

import pytest

from harness.cases.case import Case
from harness.cases.sampling import sampling_case
from harness.checks.sampling import check_sampling
from harness.targets import load_target

pytestmark = pytest.mark.tier("contract")

CASE = Case(seed=21, vocab=16, samples=((6, 4),), logit_scale=2.0)


def _case(spec, **changes) -> Case:
    """CASE for this target: the entropy over K rides along where the target has it (the hazard is the log-prob)."""
    return CASE.with_(with_entropy="sampling_entropy" in load_target(spec).capabilities, **changes)


@pytest.mark.parametrize("tp", (1, 2))
@pytest.mark.parametrize("form", ("csr", "dense"))
def test_log_probs_are_renormalised_over_the_kept_set(tp, form, spec):
    check_sampling(sampling_case(_case(spec, tp=tp), kept="random", form=form), spec)


def test_derived_top_k_is_renormalised_over_the_kept_set(spec):
    check_sampling(sampling_case(_case(spec, tp=2), kept="derived", form="derived", top_k=4, top_p=0.9), spec)
