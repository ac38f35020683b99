"""Checks of the policy loss's options (docs/policy-losses.md) beyond value and gradient parity.

Parity of every option is ``harness.checks.parity.check_policy_loss`` on a
Case carrying options (``harness.cases.policy.with_options``). Here:

* the bug-1 shape for the KL term: ``grad(kl_coef=c) - grad(kl_coef=0)`` must
  be ``c * d agg(kl)/dz``, so a KL term that lost its gradient (detached, or
  computed from detached log-probs) moves nothing and fails, whatever the
  rest of the loss does;
* the aggregation under context parallelism: the CP ranks' shares add up to
  the loss and gradient of the same batch without CP (a normaliser taken per
  rank, or a sequence statistic from the rank's part of a sample, does not).
"""

from __future__ import annotations

from harness.cases import policy
from harness.cases.case import Case
from harness.checks import expected
from harness.checks.failure import GRADIENT
from harness.checks.parity import (
    assemble_grad,
    assert_policy_loss,
    grad_scale,
    policy_loss_scale,
    policy_upstream,
    replayable,
    require,
    required_capabilities,
    total_policy_loss,
)
from harness.checks.tolerance import assert_close
from harness.jobs.logits import policy_job
from harness.ranks.run import run_job


@replayable
def check_kl_term_gradient(case: Case, spec: str = "impl") -> None:
    """grad(kl_coef) - grad(0) == kl_coef * d(agg(kl))/dz: the KL loss term really moves the gradient."""
    coef = policy.loss_options(case).kl_coef
    if coef == 0:
        raise ValueError("check_kl_term_gradient needs a Case with kl_coef != 0 (harness.cases.policy.with_options)")
    require(spec, required_capabilities(case, "policy_loss"))
    with_kl = assemble_grad(case, run_job(policy_job, case, spec))
    without = assemble_grad(case, run_job(policy_job, policy.with_options(case, kl_coef=0.0), spec))
    want = coef * expected.kl_term_grad(case)
    assert_close(
        with_kl.double() - without.double(),
        want,
        want,
        what="grad(kl_coef) - grad(0)",
        scale=2 * grad_scale(case, policy_upstream(case)),
        out_dtype=case.torch_dtype,
        kind=GRADIENT,
    )


@replayable
def check_policy_cp_invariance(case: Case, spec: str = "impl") -> None:
    """The CP ranks' loss shares and gradients equal the same batch's without context parallelism."""
    if case.cp == 1:
        raise ValueError("check_policy_cp_invariance needs a context-parallel Case (cp > 1)")
    flat_case = case.with_(cp=1, cp_mode="none")
    require(spec, required_capabilities(case, "policy_loss") | required_capabilities(flat_case, "policy_loss"))
    split, flat = run_job(policy_job, case, spec), run_job(policy_job, flat_case, spec)
    assert_policy_loss(case, split, spec)
    assert_policy_loss(flat_case, flat, spec)
    naive = expected.policy_reference(case, precise=False)
    assert_close(
        total_policy_loss(case, split),
        total_policy_loss(flat_case, flat),
        naive.loss,
        what="policy loss, CP shares vs no CP",
        scale=policy_loss_scale(case),
    )
    assert_close(
        assemble_grad(case, split),
        assemble_grad(flat_case, flat),
        naive.grad,
        what="grad(logits), CP vs no CP",
        scale=grad_scale(case, policy_upstream(case)),
        out_dtype=case.torch_dtype,
        kind=GRADIENT,
    )
