"""Named hazard: a sampled token outside the kept set gives a -inf (or NaN) log-prob.

The engine sampled ``t`` from ``K``, yet the trainer can find ``t`` outside
the ``K`` it replays: a truncated CSR row, a re-derived ``K`` whose boundary
moved with the trainer's logits, misaligned rows (docs/sampling.md, "A target
outside K"). A masked ``log_softmax`` then returns ``-inf`` for it, and the
policy loss an ``inf``/NaN ratio. The contract: under ``force_keep`` the target
joins ``K`` (slime's rule) and its log-prob is finite and exact; under
``error`` every rank raises the same clear error. Checked with the target on
either TP shard, in both given forms.

Mutant: ``sampling_target_outside_neg_inf``.
"""

import pytest

from harness.cases.case import Case
from harness.cases.sampling import sampling_case
from harness.checks.sampling import check_sampling
from harness.targets import load_target

pytestmark = pytest.mark.tier("contract")

CASE = Case(seed=23, vocab=16, samples=((7, 5),), with_entropy=True)


def _case(spec, **changes) -> Case:
    """CASE for this target: the entropy over K rides along where the target has it (the hazard is the log-prob)."""
    return CASE.with_(with_entropy="sampling_entropy" in load_target(spec).capabilities, **changes)


@pytest.mark.parametrize("tp", (1, 2))
@pytest.mark.parametrize("form", ("csr", "dense"))
def test_force_kept_target_has_a_finite_exact_log_prob(tp, form, spec):
    check_sampling(sampling_case(_case(spec, tp=tp), kept="outside", form=form, on_outside="force_keep"), spec)


@pytest.mark.parametrize("tp", (1, 2))
def test_target_outside_is_an_error_on_every_rank(tp, spec):
    check_sampling(sampling_case(_case(spec, tp=tp), kept="outside", form="csr", on_outside="error"), spec)
