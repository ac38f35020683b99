"""Checks of the token-level policy loss (``Target.token_policy_loss``, ``[B, R]`` matrices).

The loss a trainer's loss function computes from log-probs it already has:
value and gradient w.r.t. the log-probs and the entropy against the float64
oracle (``oracles/policy.py``, on the float32 values the target received),
every option at the capability it needs. Here, with no logits in between,
the gradient w.r.t. the entropy IS the bonus term's gradient, and the KL
term's is isolated as ``grad(kl_coef = c) - grad(0)``: the bug-1 shape (a
term present in the value but without its gradient) for both terms, and the
converse, a term that moves the gradient at coefficient 0.

Tolerance (the one judge, harness/checks/judge.py): the oracle reads the very
values the target got, so the only error is the target's own float32
arithmetic (the working dtype: the matrices are float32 whatever the Case's
logits dtype); the naive error is that of the reference itself (0) and the
floor is ``FLOOR_ULPS`` fp32 units at the packed checks' scales: the log-prob
magnitude (``value_scale``: the rounding of ``logp - old`` before ``exp``)
times the largest per-token weight (``policy_upstream``).

Each output is its own subtest (the loss, its gradient w.r.t. the log-probs,
w.r.t. the entropy); writes into the matrices are the inputs-unmutated
check's finding alone (``check_token_policy_inputs_unmutated``).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from harness.cases import policy, token_policy
from harness.cases.case import Case
from harness.checks import judge
from harness.checks.failure import GRADIENT
from harness.checks.parity import assert_inputs_unmutated, replayable, require
from harness.checks.policy import policy_loss_scale, policy_upstream
from harness.checks.subtests import GRAD_ENTROPY, GRAD_LOG_PROBS, LOSS, subtest
from harness.checks.tolerance import value_scale
from harness.jobs.token_policy import token_policy_job
from harness.ranks.run import run_job
from harness.targets import load_target
from harness.targets.protocol import PolicyOptions
from oracles import policy as policy_oracle


def required_capabilities(case: Case) -> set[str]:
    """``token_policy_loss``, each option's capability, and ``token_policy_entropy`` when the bonus term is on."""
    needed = {"token_policy_loss"} | PolicyOptions(**policy.option_values(case)).capabilities()
    if case.with_entropy and case.entropy_coef != 0:
        needed.add("token_policy_entropy")
    return needed


WORKING_DTYPE = torch.float32  # the [B, R] matrices a target receives are float32, whatever the logits were


def _run(case: Case, spec: str, **payload) -> dict:
    if case.world_size != 1:
        raise ValueError(
            f"token-level policy-loss checks take single-rank Cases (tp=cp=1), got tp={case.tp} cp={case.cp}"
        )
    combination = getattr(load_target(spec), "combination_needs", None)  # an adapter need not derive from Target
    options = PolicyOptions(**policy.option_values(case))
    require(spec, required_capabilities(case) | (combination(options) if combination else set()))
    (result,) = run_job(token_policy_job, case, spec, **payload)
    return result


def _leaves(values: list | None) -> list | None:
    return None if values is None else [v.double().clone().requires_grad_() for v in values]


def _grads(loss: torch.Tensor, leaves: list | None, sent: token_policy.TokenPolicyInputs):
    """``d loss / d leaves`` as a ``[B, R]`` float64 matrix (zeros on padding), None without leaves."""
    if leaves is None:
        return None
    if not leaves or not loss.requires_grad:
        grads = [torch.zeros_like(leaf) for leaf in leaves]
    else:
        grads = torch.autograd.grad(loss, leaves, allow_unused=True, retain_graph=True)
        grads = [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves)]
    return sent.matrix(grads).double() if grads else torch.zeros(0, sent.width, dtype=torch.float64)


def reference(case: Case, opts=None, zero_advantages: bool = False) -> tuple:
    """The oracle's ``(loss, grad w.r.t. log-probs [B, R], grad w.r.t. entropy [B, R] or None)``.

    ``opts``: the oracle's options (the Case's by default); ``zero_advantages``: a policy term with
    neither value nor gradient (what is left is the KL and entropy terms).
    """
    sent = token_policy.inputs(case)
    opts = opts if opts is not None else policy.loss_options(case)
    log_probs, entropy = _leaves(sent.log_probs), _leaves(sent.entropy)
    advantages = [torch.zeros_like(a) for a in sent.advantages] if zero_advantages else sent.advantages
    loss = policy_oracle.policy_loss(
        log_probs,
        sent.old_log_probs,
        advantages,
        sent.loss_masks,
        opts,
        ref=sent.ref_log_probs,
        rollout=sent.rollout_log_probs,
        entropy=entropy,
    )
    return loss.detach(), _grads(loss, log_probs, sent), _grads(loss, entropy, sent)


def grad_scale(case: Case) -> float:
    """The gradient's arithmetic scale: the log-prob magnitude times the largest per-token weight."""
    return value_scale(case.global_logits(), case.temperature) * policy_upstream(case)


@replayable
def check_token_policy_loss(case: Case, spec: str = "impl") -> None:
    """The token-level loss and its gradients w.r.t. log-probs and entropy match the oracle, each on its own."""
    result = _run(case, spec)
    loss, grad_log_probs, grad_entropy = reference(case)
    with subtest(LOSS):
        judge.value(
            result["loss"],
            loss,
            loss,
            what="token-level policy loss",
            scale=policy_loss_scale(case),
            working_dtype=WORKING_DTYPE,
        )
    with subtest(GRAD_LOG_PROBS):
        judge.gradient(
            result["grad_log_probs"],
            grad_log_probs,
            grad_log_probs,
            what="grad(log_probs) of the token-level policy loss",
            scale=grad_scale(case),
            working_dtype=WORKING_DTYPE,
        )
    if grad_entropy is not None:
        with subtest(GRAD_ENTROPY):
            judge.gradient(
                result["grad_entropy"],
                grad_entropy,
                grad_entropy,
                what="grad(entropy) of the token-level policy loss",
                scale=grad_scale(case),
                working_dtype=WORKING_DTYPE,
            )


@replayable
def check_token_policy_inputs_unmutated(case: Case, spec: str = "impl") -> None:
    """The token-level loss leaves every matrix it was handed unwritten (log-probs and entropy are copies)."""
    assert_inputs_unmutated([_run(case, spec, inputs_only=True)])


@replayable
def check_token_entropy_term_gradient(case: Case, spec: str = "impl") -> None:
    """grad(entropy) is ``-c d agg(H)/dH``: exactly 0 at ``c = 0`` (no term), the term's gradient otherwise."""
    if not case.with_entropy:
        raise ValueError("check_token_entropy_term_gradient needs a Case with with_entropy=True")
    result = _run(case, spec)
    _, _, want = reference(case)
    with subtest(GRAD_ENTROPY):
        if case.entropy_coef == 0:
            judge.identical(
                result["grad_entropy"], torch.zeros_like(want), what="grad(entropy) at entropy_coef=0", kind=GRADIENT
            )
            return
        judge.gradient(
            result["grad_entropy"],
            want,
            want,
            what="grad(entropy) of the bonus",
            scale=grad_scale(case),
            working_dtype=WORKING_DTYPE,
        )


@replayable
def check_token_kl_term_gradient(case: Case, spec: str = "impl") -> None:
    """grad(kl_coef) - grad(0) w.r.t. the log-probs == kl_coef * d agg(kl)/d logp: the KL term really moves it."""
    coef = policy.loss_options(case).kl_coef
    if coef == 0:
        raise ValueError("check_token_kl_term_gradient needs a Case with kl_coef != 0 (harness.cases.policy)")
    with_kl = _run(case, spec)["grad_log_probs"]
    without = _run(policy.with_options(case, kl_coef=0.0), spec)["grad_log_probs"]
    kl_only = replace(policy.loss_options(case), kl_coef=1.0, entropy_coef=0.0, rollout_correction=None)
    _, per_unit, _ = reference(case, kl_only, zero_advantages=True)
    want = coef * per_unit
    with subtest(GRAD_LOG_PROBS):
        judge.gradient(
            with_kl.double() - without.double(),
            want,
            want,
            what="grad(kl_coef) - grad(0) w.r.t. log_probs",
            scale=2 * grad_scale(case),
            working_dtype=WORKING_DTYPE,
        )
