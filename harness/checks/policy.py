"""Checks of the packed policy loss (docs/policy-losses.md): parity, and what parity alone cannot see.

* parity (``check_policy_loss``): every output on its own
  (``harness.checks.subtests``): the graph flags (the entropy gate), the
  returned log-probs and entropy, the loss and grad(logits) against the
  float64 oracle, every option on a Case carrying it
  (``harness.cases.policy.with_options``); and, where the returned log-probs
  and entropy are the very tensors the loss consumed (a backward leaves a
  gradient on them), the loss and its gradients w.r.t. them judged on THOSE
  values (``loss(log_probs)``, ``grad(log_probs)``, ``grad(entropy)``): what
  the loss does with its inputs, apart from how the log-probs were computed,
  so a log-prob defect does not hide a loss defect;
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

import torch

from harness.cases import policy
from harness.cases.case import Case
from harness.checks import expected, judge
from harness.checks.failure import CheckFailure
from harness.checks.parity import (
    assemble_grad,
    assert_entropy_gate,
    assert_packed_forward,
    cp_groups,
    gather_samples,
    grad_scale,
    max_abs,
    replayable,
    replicated,
    require,
    required_capabilities,
    run_ranks,
)
from harness.checks.subtests import (
    GRAD_ENTROPY,
    GRAD_LOG_PROBS,
    GRAD_LOGITS,
    LOSS,
    LOSS_OF_OWN_LOG_PROBS,
    subtest,
)
from harness.checks.tolerance import value_scale
from harness.jobs.logits import policy_job
from oracles import policy as policy_oracle


def policy_upstream(case: Case) -> float:
    """Largest d(loss)/d(log-prob or entropy) of one token, before the aggregation divides it (by at least 1).

    The larger of a bound from the drawn ranges (|A| times the clipped ratio, GSPO's sample ratio up to
    e^0.8, times the rollout weight's cap; the KL estimators' gradients under 2 near the reference) and the
    exact per-token gradient of the oracle's terms on the Case's own inputs: in the far regimes
    (``harness.cases.policy``) a ratio of 20 or a reference 6 nats away moves a token far more than the
    near-regime bound says.
    """
    opts = policy.loss_options(case)
    ratio = (1 + policy.EPS_CLIP_HIGH) * 1.5 if opts.kind != "gspo" else 2.3
    weight = opts.rollout_cap if opts.rollout_correction else 1.0
    drawn = max_abs(case.advantages()) * ratio * weight + 2 * abs(opts.kl_coef)
    return max(drawn, _exact_upstream(case)) + abs(case.entropy_coef)


def _exact_upstream(case: Case) -> float:
    """The largest per-token gradient of the oracle's policy term plus the KL term's (no aggregation)."""
    opts = policy.loss_options(case)
    log_probs = [lp.clone().requires_grad_() for lp in expected.policy_reference(case).log_probs]
    old, masks = policy.as_sent(policy.old_log_probs(case)), case.loss_masks()
    rollout = policy.rollout_log_probs(case) if opts.rollout_correction else [None] * len(log_probs)
    ref = policy.ref_log_probs(case) if opts.kl_coef != 0 else None
    largest = [0.0, 0.0]  # the policy term's, the KL term's
    for i, (lp, o, a, m, ro) in enumerate(zip(log_probs, old, case.advantages(), masks, rollout, strict=True)):
        if not lp.numel():
            continue
        terms = [policy_oracle.pg_terms(lp, o, a, m, opts, rollout=ro)]
        if ref is not None:
            kl = policy_oracle.kl(lp, ref[i], opts.kl_kind)
            terms.append(opts.kl_coef * (kl * policy_oracle.ratio(lp, o) if opts.kl_ratio_weighted else kl))
        for which, term in enumerate(terms):
            if term.requires_grad:
                (grad,) = torch.autograd.grad(term.sum(), lp, allow_unused=True)
                if grad is not None:
                    largest[which] = max(largest[which], float(grad.abs().max()))
    return sum(largest)


@replayable
def check_policy_loss(case: Case, spec: str = "impl") -> None:
    """The PPO loss and its gradient match the oracle; the entropy gate is honoured."""
    require(spec, required_capabilities(case, "policy_loss"))
    assert_policy_loss(case, run_ranks(policy_job, case, spec), spec)


def policy_loss_scale(case: Case) -> float:
    """The policy loss's value scale: per-term bound times the number of terms it adds (samples, or tokens)."""
    token_sum = policy.loss_options(case).aggregation == "token-sum"
    terms = sum(case.response_lengths) if token_sum else len(case.samples)
    return value_scale(case.global_logits(), case.temperature) * policy_upstream(case) * max(terms, 1)


def total_policy_loss(case: Case, results: list):
    """The batch's loss: under context parallelism each CP rank returns its share, and the shares add up."""
    return sum(replicated(group, "loss") for group in cp_groups(case, results))


def assert_policy_loss(case: Case, results: list, spec: str) -> None:
    """Each output of the policy path: graph flags, log-probs and entropy, the loss and its gradients."""
    ref, naive = expected.policy_reference(case), expected.policy_reference(case, precise=False)
    assert_entropy_gate(case, results, spec)
    if all(result.get("log_probs") is not None for result in results):
        assert_packed_forward(case, results)
    with subtest(LOSS):
        judge.value(
            total_policy_loss(case, results),
            ref.loss,
            naive.loss,
            what="policy loss",
            scale=policy_loss_scale(case),
            working_dtype=case.torch_dtype,
        )
    with subtest(GRAD_LOGITS):
        judge.gradient(
            assemble_grad(case, results),
            ref.grad,
            naive.grad,
            what="grad(logits) of the policy loss",
            scale=grad_scale(case, policy_upstream(case)),
            working_dtype=case.torch_dtype,
        )
    assert_loss_of_own_log_probs(case, results)


def _own_inputs(case: Case, results: list):
    """The per-sample log-probs and entropy the target returned AND its loss consumed (float64), with the
    gradients its backward left on them; None where that cannot be told (outputs off the loss's graph)."""
    grads = gather_samples(case, results, "grad_log_probs", agree=False)
    if grads is None or any(result.get("log_probs") is None for result in results):
        return None
    log_probs = gather_samples(case, results, "log_probs", agree=False)
    entropy = entropy_grads = None
    if case.with_entropy and case.entropy_coef != 0:
        entropy_grads = gather_samples(case, results, "grad_entropy", agree=False)
        if entropy_grads is None:
            return None
        entropy = gather_samples(case, results, "entropy", agree=False)
    if any(v.dtype not in (torch.float32, torch.float64) for v in log_probs + (entropy or [])):
        return None  # rounded to a 16-bit type on the way out: not exactly what a float32 loss consumed
    return log_probs, grads, entropy, entropy_grads


def own_reference(case: Case, log_probs: list, entropy: list | None) -> tuple:
    """The oracle's loss at the target's own log-probs and entropy, and its gradients w.r.t. them.

    At masked positions (mask 0: multiplied by 0, read as 0 where dropped) the log-prob is taken as the
    behaviour policy's, so ``exp(logp - old)`` cannot overflow into ``inf * 0``; the loss does not read them.
    """
    opts = policy.loss_options(case)
    old = policy.as_sent(policy.old_log_probs(case))
    masks = case.loss_masks()
    own = [torch.where(m > 0, v.double(), o) for v, o, m in zip(log_probs, old, masks, strict=True)]
    leaves = [v.clone().requires_grad_() for v in own]
    entropy_leaves = None if entropy is None else [v.double().clone().requires_grad_() for v in entropy]
    loss = policy_oracle.policy_loss(
        leaves,
        old,
        case.advantages(),
        masks,
        opts,
        ref=policy.ref_log_probs(case) if opts.kl_coef != 0 else None,
        rollout=policy.rollout_log_probs(case) if opts.rollout_correction else None,
        entropy=entropy_leaves,
    )
    inputs = leaves + (entropy_leaves or [])
    if loss.requires_grad and inputs:
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    else:
        grads = [None] * len(inputs)
    grads = [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, inputs)]
    return loss.detach(), grads[: len(leaves)], grads[len(leaves) :] or None


def assert_loss_of_own_log_probs(case: Case, results: list) -> None:
    """The loss as a function of the log-probs (and entropy) the target returned, judged at those values.

    Only where those outputs are the loss's own inputs (``_own_inputs``);
    the float64 oracle on the same float32 values leaves the target's
    float32 arithmetic as the only error (the naive error is the reference's
    own, 0; the floor as the token-level loss's, ``harness.checks.token_policy``).
    """
    try:
        own = _own_inputs(case, results)
    except CheckFailure:  # a layout the log-probs' own subtest reports
        return
    if own is None:
        return
    log_probs, grads, entropy, entropy_grads = own
    want_loss, want_grads, want_entropy_grads = own_reference(case, log_probs, entropy)
    with subtest(LOSS_OF_OWN_LOG_PROBS):
        judge.value(
            total_policy_loss(case, results),
            want_loss,
            want_loss,
            what="policy loss at its own log-probs",
            scale=policy_loss_scale(case),
            working_dtype=torch.float32,
        )
    scale = value_scale(case.global_logits(), case.temperature) * policy_upstream(case)
    for output, got, want in ((GRAD_LOG_PROBS, grads, want_grads), (GRAD_ENTROPY, entropy_grads, want_entropy_grads)):
        if got is None or want is None:
            continue
        with subtest(output):
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                judge.gradient(
                    g, w, w, what=f"{output}[sample {i}] at its own values", scale=scale, working_dtype=torch.float32
                )


@replayable
def check_entropy_bonus_gradient(case: Case, spec: str = "impl") -> None:
    """grad(c) - grad(0) == -c * d(agg(H))/dz (the Case's aggregation): the bonus really moves the gradient."""
    require(spec, required_capabilities(case, "policy_loss"), every_example={"entropy"})
    with_bonus, without = run_ranks(policy_job, case, spec), run_ranks(policy_job, case.with_(entropy_coef=0.0), spec)
    want = -case.entropy_coef * expected.entropy_bonus_grad(case)
    with subtest(GRAD_LOGITS):
        judge.gradient(
            assemble_grad(case, with_bonus).double() - assemble_grad(case, without).double(),
            want,
            want,
            what="grad(coef) - grad(0)",
            scale=2 * grad_scale(case, policy_upstream(case)),
            working_dtype=case.torch_dtype,
        )


@replayable
def check_kl_term_gradient(case: Case, spec: str = "impl") -> None:
    """grad(kl_coef) - grad(0) == kl_coef * d(agg(kl))/dz: the KL loss term really moves the gradient."""
    coef = policy.loss_options(case).kl_coef
    if coef == 0:
        raise ValueError("check_kl_term_gradient needs a Case with kl_coef != 0 (harness.cases.policy.with_options)")
    require(spec, required_capabilities(case, "policy_loss"))
    with_kl = run_ranks(policy_job, case, spec)
    without = run_ranks(policy_job, policy.with_options(case, kl_coef=0.0), spec)
    want = coef * expected.kl_term_grad(case)
    with subtest(GRAD_LOGITS):
        judge.gradient(
            assemble_grad(case, with_kl).double() - assemble_grad(case, without).double(),
            want,
            want,
            what="grad(kl_coef) - grad(0)",
            scale=2 * grad_scale(case, policy_upstream(case)),
            working_dtype=case.torch_dtype,
        )


@replayable
def check_policy_cp_invariance(case: Case, spec: str = "impl") -> None:
    """The CP ranks' loss shares and gradients equal the same batch's without context parallelism."""
    if case.cp == 1:
        raise ValueError("check_policy_cp_invariance needs a context-parallel Case (cp > 1)")
    flat_case = case.with_(cp=1, cp_mode="none")
    require(spec, required_capabilities(case, "policy_loss") | required_capabilities(flat_case, "policy_loss"))
    split, flat = run_ranks(policy_job, case, spec), run_ranks(policy_job, flat_case, spec)
    assert_policy_loss(case, split, spec)
    assert_policy_loss(flat_case, flat, spec)
    naive = expected.policy_reference(case, precise=False)
    with subtest(LOSS):
        judge.value(
            total_policy_loss(case, split),
            total_policy_loss(flat_case, flat),
            naive.loss,
            what="policy loss, CP shares vs no CP",
            scale=policy_loss_scale(case),
            working_dtype=case.torch_dtype,
        )
    with subtest(GRAD_LOGITS):
        judge.gradient(
            assemble_grad(case, split),
            assemble_grad(flat_case, flat),
            naive.grad,
            what="grad(logits), CP vs no CP",
            scale=grad_scale(case, policy_upstream(case)),
            working_dtype=case.torch_dtype,
        )
