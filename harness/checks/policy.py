"""Checks of the packed policy loss (docs/policy-losses.md): parity, and what parity alone cannot see.

* parity (``check_policy_loss``): the loss and grad(logits) against the
  float64 oracle, every option on a Case carrying it
  (``harness.cases.policy.with_options``), the entropy gate first;
* the bug-1 shape for the entropy bonus: ``grad(c) - grad(0)`` must be
  ``-c * d agg(H)/dz`` (``check_entropy_bonus_gradient``);
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
    assert_entropy_gate,
    assert_inputs_unmutated,
    cp_groups,
    grad_scale,
    max_abs,
    replayable,
    replicated,
    require,
    required_capabilities,
)
from harness.checks.tolerance import assert_close, value_scale
from harness.jobs.logits import policy_job
from harness.ranks.run import run_job


def policy_upstream(case: Case) -> float:
    """Largest d(loss)/d(log-prob or entropy): |A| times the ratio bound, plus the KL and entropy coefficients.

    Every aggregation divides a token's term by at least 1 (a count, a number
    of samples, a horizon >= 1), so the per-term bounds hold for all of them:
    the ratio is the clipped one (GSPO: the sample's, up to e^0.8), times the
    rollout weight's cap; the KL estimators' gradients stay under 2 for the
    drawn log-ratios (ratio-weighted included).
    """
    opts = policy.loss_options(case)
    ratio = (1 + policy.EPS_CLIP_HIGH) * 1.5 if opts.kind != "gspo" else 2.3
    weight = opts.rollout_cap if opts.rollout_correction else 1.0
    return max_abs(case.advantages()) * ratio * weight + 2 * abs(opts.kl_coef) + abs(case.entropy_coef)


@replayable
def check_policy_loss(case: Case, spec: str = "impl") -> None:
    """The PPO loss and its gradient match the oracle; the entropy gate is honoured."""
    require(spec, required_capabilities(case, "policy_loss"))
    assert_policy_loss(case, run_job(policy_job, case, spec), spec)


def policy_loss_scale(case: Case) -> float:
    """The policy loss's value scale: per-term bound times the number of terms it adds (samples, or tokens)."""
    token_sum = policy.loss_options(case).aggregation == "token-sum"
    terms = sum(case.response_lengths) if token_sum else len(case.samples)
    return value_scale(case.global_logits(), case.temperature) * policy_upstream(case) * max(terms, 1)


def total_policy_loss(case: Case, results: list):
    """The batch's loss: under context parallelism each CP rank returns its share, and the shares add up."""
    return sum(replicated(group, "loss") for group in cp_groups(case, results))


def assert_policy_loss(case: Case, results: list, spec: str) -> None:
    ref, naive = expected.policy_reference(case), expected.policy_reference(case, precise=False)
    # The gate first: an inverted one (bug 1) is then named as such, not as a gradient mismatch.
    assert_entropy_gate(case, results, spec)
    loss = total_policy_loss(case, results)
    assert_close(
        loss, ref.loss, naive.loss, what="policy loss", scale=policy_loss_scale(case), working_dtype=case.torch_dtype
    )
    assert_close(
        assemble_grad(case, results),
        ref.grad,
        naive.grad,
        what="grad(logits) of the policy loss",
        scale=grad_scale(case, policy_upstream(case)),
        out_dtype=case.torch_dtype,
        kind=GRADIENT,
        working_dtype=case.torch_dtype,
    )
    assert_inputs_unmutated(results)


@replayable
def check_entropy_bonus_gradient(case: Case, spec: str = "impl") -> None:
    """grad(c) - grad(0) == -c * d(agg(H))/dz (the Case's aggregation): the bonus really moves the gradient."""
    require(spec, required_capabilities(case, "policy_loss") | {"entropy"})
    with_bonus = assemble_grad(case, run_job(policy_job, case, spec))
    without = assemble_grad(case, run_job(policy_job, case.with_(entropy_coef=0.0), spec))
    want = -case.entropy_coef * expected.entropy_bonus_grad(case)
    difference = with_bonus.double() - without.double()
    assert_close(
        difference,
        want,
        want,
        what="grad(coef) - grad(0)",
        scale=2 * grad_scale(case, policy_upstream(case)),
        out_dtype=case.torch_dtype,
        kind=GRADIENT,
        working_dtype=case.torch_dtype,
    )


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
