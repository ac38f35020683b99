"""The sampling-replay checks: values and gradients over the kept set against the float64 oracle.

``check_sampling(case, spec)`` runs a sampling Case (``harness.cases.sampling``)
on every rank and compares the processed log-probs and entropy
(docs/sampling.md) and every rank's gradient shard of ``sum(a*lp + b*H)`` with
``oracles/sampling.py`` under the tolerance policy; the naive yardstick is
plain ``log_softmax`` in the Case's dtype over the masked logits, through the
one judge (``harness.checks.judge``, the working dtype the Case's). Each output
is its own subtest; TP ranks must agree bit for bit and the gradient must be
exactly 0 outside ``K``. Neither the logits nor the kept-set tensors may be
written: the inputs-unmutated check's finding alone
(``check_sampling_inputs_unmutated``; the target gets a fresh copy of the
logits). A target outside ``K`` under ``on_outside="error"`` must raise a
clear error on EVERY rank.
"""

from __future__ import annotations

import math

import torch

from harness.cases import sampling
from harness.cases.case import Case
from harness.checks import judge
from harness.checks.expected import Reference, _grad_of
from harness.checks.failure import ACCEPTED, ERROR, GRADIENT, LAYOUT, UNCLEAR, CheckFailure, ensure
from harness.checks.parity import (
    assemble_grad,
    assert_inputs_unmutated,
    assert_replicated_values,
    gather_samples,
    grad_scale,
    max_abs,
    replayable,
    replicated,
    require,
    run_ranks,
)
from harness.checks.subtests import ENTROPY, ERRORS, GRAD_LOGITS, LOG_PROBS, subtest
from harness.checks.tolerance import value_scale
from harness.jobs.sampling import sampling_job, sampling_packed_job
from oracles import losses, token
from oracles import sampling as oracle

OUTSIDE_ERROR_WORDS = ("outside", "kept")


def effective_kept(case: Case) -> torch.Tensor:
    """The set the processed distribution is over: ``K``, or ``K ∪ {t}`` under force-keep."""
    kept, targets = sampling.kept_and_targets(case)
    return oracle.force_keep(kept, targets) if sampling.spec(case)["on_outside"] == "force_keep" else kept


def expects_error(case: Case) -> bool:
    s = sampling.spec(case)
    # a packed Case without a response row has no sampled token to be outside K
    has_rows = not s["packed"] or sum(case.response_lengths) > 0
    return s["kept"] == "outside" and s["on_outside"] == "error" and has_rows


def _processed(case: Case, leaf: torch.Tensor, precise: bool) -> tuple:
    """Per row of ``K`` (every row, or a packed Case's response rows): float64 log-probs and entropy of ``leaf``."""
    s = sampling.spec(case)
    kept, targets = sampling.kept_and_targets(case)
    rows = leaf[sampling.response_index(case)] if s["packed"] else leaf
    if precise:
        log_probs = oracle.processed_log_probs(rows, targets, kept, case.temperature, s["on_outside"])
        return log_probs, oracle.processed_entropy(rows, effective_kept(case), case.temperature)
    masked = torch.where(effective_kept(case), rows, torch.full_like(rows, -math.inf))
    log_probs = token.naive_log_probs(masked, targets, case.temperature).double()
    return log_probs, token.naive_entropy(masked, case.temperature).double()


def _finite_only(log_probs: torch.Tensor) -> torch.Tensor:
    """A ``-inf`` log-prob (``neg_inf``: a constant, gradient 0) contributes nothing to the probe loss."""
    return torch.where(torch.isfinite(log_probs.detach()), log_probs, 0.0)


def sampling_reference(case: Case, precise: bool = True) -> Reference:
    """Oracle (float64) or naive (Case dtype) log-probs, entropy and the probe loss's gradient."""
    logits = case.global_logits()
    leaf = (logits.double() if precise else logits.clone()).requires_grad_()
    log_probs, entropy = _processed(case, leaf, precise)
    a, b = case.row_probe_weights()
    loss = (a * _finite_only(log_probs)).sum()
    if case.with_entropy:
        loss = loss + (b * entropy).sum()
    else:
        entropy = None
    return Reference(log_probs.detach(), None if entropy is None else entropy.detach(), _grad_of(loss, leaf))


def packed_sampling_reference(case: Case, precise: bool = True) -> Reference:
    """As ``sampling_reference`` for a packed Case: per-sample values, the packed probe loss's gradient."""
    logits = case.global_logits()
    leaf = (logits.double() if precise else logits.clone()).requires_grad_()
    log_probs, entropy = (torch.split(v, case.response_lengths) for v in _processed(case, leaf, precise))
    entropy = entropy if case.with_entropy else None
    a, b = case.probe_weights()
    loss = losses.probe_loss([_finite_only(v) for v in log_probs], entropy, a, b)
    values = [v.detach() for v in log_probs]
    return Reference(values, None if entropy is None else [v.detach() for v in entropy], _grad_of(loss, leaf))


def assert_every_rank_raised(results: list, words, what: str) -> None:
    """Every rank raised (no silent answer on any), and each error names ``words`` (output ``ERRORS``)."""
    with subtest(ERRORS):
        _every_rank_raised(results, words, what)


def _every_rank_raised(results: list, words, what: str) -> None:
    silent = [rank for rank, result in enumerate(results) if result["error"] is None]
    ensure(not silent, ACCEPTED, f"{what}: rank(s) {silent} returned values instead of raising (a silent wrong answer)")
    for rank, result in enumerate(results):
        text = f"{result['error_type']}: {result['error']}"
        ensure(
            any(word in result["error"] for word in words),
            UNCLEAR,
            f"{what}, rank {rank}: the error must name {words}: {text}",
        )


def _raise_target_errors(results: list) -> None:
    for rank, result in enumerate(results):
        if result["error"] is not None:
            raise CheckFailure(f"rank {rank} raised {result['error_type']}: {result['error']}", kind=ERROR)


@replayable
def check_sampling(case: Case, spec: str = "impl") -> None:
    """Values and gradients over ``K`` match the oracle (or the clear error a target outside ``K`` owes)."""
    require(spec, sampling.capabilities(case))
    results = run_ranks(sampling_job, case, spec)
    if expects_error(case):
        assert_every_rank_raised(results, OUTSIDE_ERROR_WORDS, "a target outside K with on_outside='error'")
        return
    _raise_target_errors(results)
    assert_sampling_values(case, results)
    assert_sampling_grad(case, results)


def assert_sampling_values(case: Case, results: list) -> None:
    ref, naive = sampling_reference(case), sampling_reference(case, precise=False)
    scale = value_scale(case.global_logits(), case.temperature)
    assert_replicated_values(case, results, ref, naive, scale=scale, label=" over K")


def assert_sampling_grad(case: Case, results: list) -> None:
    ref, naive = sampling_reference(case), sampling_reference(case, precise=False)
    a, b = case.row_probe_weights()
    upstream = float(a.abs().max()) + (float(b.abs().max()) if case.with_entropy else 0.0)
    _assert_grad_over_kept(case, results, ref, naive, upstream)


def _assert_grad_over_kept(case: Case, results: list, ref: Reference, naive: Reference, upstream: float) -> None:
    """The assembled gradient: exactly 0 outside ``K`` (and on every row ``K`` does not cover), else the oracle's."""
    with subtest(GRAD_LOGITS):
        grad = assemble_grad(case, results)
        if sampling.spec(case)["packed"]:
            kept = torch.zeros(case.rows, case.vocab, dtype=torch.bool)
            kept[sampling.response_index(case)] = effective_kept(case)
        else:
            kept = effective_kept(case)
        outside = grad[~kept]
        if not bool((outside == 0).all()):
            raise CheckFailure(
                f"the gradient outside K must be exactly 0; {int((outside != 0).sum())} entries are not "
                f"(largest {float(outside.abs().max()):.3e})",
                kind=GRADIENT,
            )
        judge.gradient(
            grad,
            ref.grad,
            naive.grad,
            what="grad(logits) over K",
            scale=grad_scale(case, upstream),
            working_dtype=case.torch_dtype,
        )


@replayable
def check_sampling_inputs_unmutated(case: Case, spec: str = "impl") -> None:
    """The sampling call (and its backward) leaves the logits and the kept-set tensors unwritten on every rank."""
    require(spec, sampling.capabilities(case))
    job = sampling_packed_job if sampling.spec(case)["packed"] else sampling_job
    assert_inputs_unmutated(run_ranks(job, case, spec, inputs_only=True))


@replayable
def check_sampling_packed(case: Case, spec: str = "impl") -> None:
    """A packed Case (TP x CP): per-sample values over ``K`` and the gradient match the oracle on every rank."""
    require(spec, sampling.capabilities(case))
    results = run_ranks(sampling_packed_job, case, spec)
    if expects_error(case):
        assert_every_rank_raised(results, OUTSIDE_ERROR_WORDS, "a target outside K with on_outside='error'")
        return
    _raise_target_errors(results)
    ref, naive = packed_sampling_reference(case), packed_sampling_reference(case, precise=False)
    scale = value_scale(case.global_logits(), case.temperature)
    for key in (LOG_PROBS, ENTROPY) if case.with_entropy else (LOG_PROBS,):
        with subtest(key):
            got = gather_samples(case, results, key)
            ensure(got is not None and len(got) == len(case.response_lengths), LAYOUT, f"{key}: not one per sample")
            for i, (value, want, rough) in enumerate(zip(got, getattr(ref, key), getattr(naive, key))):
                judge.value(
                    value, want, rough, what=f"{key}[sample {i}] over K", scale=scale, working_dtype=case.torch_dtype
                )
    a, b = case.probe_weights()
    upstream = max_abs(a) + (max_abs(b) if case.with_entropy else 0.0)
    _assert_grad_over_kept(case, results, ref, naive, upstream)


@replayable
def check_given_derived_equivalence(case: Case, spec: str = "impl") -> None:
    """The same ``K`` handed as CSR and derived from its parameters gives the same values on every rank."""
    derived = sampling.sampling_case(case, **{**sampling.spec(case), "kept": "derived", "form": "derived"})
    given = sampling.sampling_case(case, **{**sampling.spec(case), "kept": "derived", "form": "csr"})
    require(spec, sampling.capabilities(derived) | sampling.capabilities(given))
    from_params, from_csr = run_ranks(sampling_job, derived, spec), run_ranks(sampling_job, given, spec)
    _raise_target_errors(from_params + from_csr)
    scale = value_scale(case.global_logits(), case.temperature)
    for key in (LOG_PROBS, ENTROPY) if case.with_entropy else (LOG_PROBS,):
        with subtest(key):
            want = replicated(from_csr, key)
            # the two paths build the same entries in a different order: rounding-level differences only
            judge.value(
                replicated(from_params, key),
                want.double(),
                want,
                what=f"{key}: derived K vs given K",
                scale=scale,
                working_dtype=case.torch_dtype,
            )
