"""Who owns the logits' storage and graph: shared logits, a retained graph backpropagated twice, donation.

Bug 2 (docs/bugs.md) is an in-place write into a tensor another node saved; the
same mechanism hides behind donation (``donate_logits=True`` lets impl/
write its gradient over the logits). These checks share one job shape
(``harness.jobs.logits``) and one concern, the lifetime of the caller's buffer, so
they live together, apart from the value checks of ``harness.checks.parity``.
"""

from __future__ import annotations

import torch

from harness.cases.case import Case
from harness.checks import expected, judge
from harness.checks.failure import ACCEPTED, ERROR, GRADIENT, MUTATION, VALUE, CheckFailure, ensure
from harness.checks.parity import (
    assemble_grad,
    assert_inputs_unmutated,
    grad_scale,
    replayable,
    require,
    required_capabilities,
    run_ranks,
)
from harness.checks.subtests import ENTROPY, ERRORS, GRAD_LOGITS, INPUTS, LOG_PROBS, subtest
from harness.checks.tolerance import value_scale
from harness.jobs.inputs import WRITES
from harness.jobs.logits import donation_job, selected_rows, shared_logits_job


@replayable
def check_shared_logits(case: Case, spec: str = "impl", *, backwards: int = 1) -> None:
    """Bug 2: log-probs (chunked and not) and entropy on the same logits and an overlapping view.

    One backward (``backwards=2``: one with ``retain_graph=True``, then a
    second): no version-counter error, the logits bit-identical with an
    unchanged version after the forward and after the backward(s), values and
    every gradient equal to the oracle.
    """
    require(spec, {"temperature"} if case.temperature != 1.0 else set(), every_example={"token", "entropy", "chunking"})
    assert case.rows >= 2, "the overlapping view logits[1:] needs at least two rows"
    chunk_size = case.chunk_size or max(1, case.rows // 2)
    results = run_ranks(shared_logits_job, case, spec, chunk_size=chunk_size, backwards=backwards)
    with subtest(INPUTS):
        for rank, result in enumerate(results):
            after = result["after_forward"][WRITES]["logits"]
            ensure(after["unchanged"], MUTATION, f"rank {rank}: the forward modified the logits")
            delta = after["version_delta"]
            ensure(delta == 0, MUTATION, f"rank {rank}: the forward moved the logits' version counter by {delta}")
    assert_inputs_unmutated(results)
    ref = expected.shared_logits_reference(case)
    scale = value_scale(case.global_logits(), case.temperature)
    names = ("log_probs", "entropy", "chunked log_probs", "log_probs of logits[1:]", "entropy of logits[1:]")
    outputs = (LOG_PROBS, ENTROPY, LOG_PROBS, LOG_PROBS, ENTROPY)
    for name, output, actual, want in zip(names, outputs, results[0]["values"], ref.log_probs, strict=True):
        with subtest(output):
            # The floor includes rounding to the dtype the target returns (an upstream
            # entropy may stay in the logits' bf16); impl returns fp32.
            judge.value(
                actual, want, want, what=name, scale=scale, out_dtype=actual.dtype, working_dtype=case.torch_dtype
            )
    a, b = case.row_probe_weights()
    upstream = 3 * float(a.abs().max()) + 2 * float(b.abs().max())
    labels = ("first backward", "second backward (retain_graph)")[:backwards]
    with subtest(GRAD_LOGITS):
        for which, label in enumerate(labels):
            grad = assemble_grad(case, [{"grad": r["grads"][which]} for r in results])
            judge.gradient(
                grad,
                ref.grad,
                ref.grad,
                what=f"grad(logits), {label}",
                scale=grad_scale(case, upstream),
                working_dtype=case.torch_dtype,
            )


@replayable
def check_second_backward(case: Case, spec: str = "impl") -> None:
    """Bug 2's re-entrant form: the same graph, retained, backpropagated twice gives the same gradient."""
    check_shared_logits(case, spec, backwards=2)


# ---- donation ------------------------------------------------------------------------


@replayable
def check_donation(case: Case, spec: str = "impl") -> None:
    """Donation gives the same values and gradient, bit for bit, or refuses loudly; never a silent wrong answer.

    * donated vs plain: identical log-probs, entropy and gradient on every rank;
    * a second backward (retain_graph) after donation raises;
    * with another node that saved the logits, donation either raises or
      returns exactly the gradient of the same graph without donation;
    * a response-only Case evaluates only its selected rows (``rows=``,
      capability ``token_rows``): the donated buffer held logits in the rows
      never read, which must read exactly 0, and the selected rows' log-probs
      must be the oracle's (a selection applied to the wrong rows).
    """
    rows = selected_rows(case)
    require(
        spec,
        required_capabilities(case, "token")
        | {"donation", "entropy"}
        | ({"token_rows"} if rows is not None else set()),
    )
    results = run_ranks(donation_job, case, spec)
    for rank, result in enumerate(results):
        plain, donated = result["plain"], result["donated"]
        ensure(
            plain["error"] is None and donated["error"] is None,
            ERROR,
            f"rank {rank}: {plain['error'] or donated['error']}",
        )
        for consumer in ("before", "after"):
            reference_run = result[f"consumer_{consumer}"]
            ensure(reference_run["error"] is None, ERROR, f"rank {rank}: {reference_run['error']}")
    for key, output in (("log_probs", LOG_PROBS), ("entropy", ENTROPY), ("grad", GRAD_LOGITS)):
        with subtest(output):
            kind = GRADIENT if key == "grad" else VALUE
            for rank, result in enumerate(results):
                plain, donated = result["plain"], result["donated"]
                judge.identical(donated[key], plain[key], what=f"rank {rank} {key}, donated vs plain", kind=kind)
    with subtest(ERRORS):
        for rank, result in enumerate(results):
            refused = result["twice"]["error"] is not None
            ensure(refused, ACCEPTED, f"rank {rank}: a second backward after donation did not refuse")
    with subtest(GRAD_LOGITS):
        for rank, result in enumerate(results):
            for consumer in ("before", "after"):
                reference_run, run = result[f"consumer_{consumer}"], result[f"donated_consumer_{consumer}"]
                if run["error"] is None:
                    judge.identical(
                        run["grad"],
                        reference_run["grad"],
                        what=f"rank {rank} grad with another consumer {consumer}, donated vs plain",
                        kind=GRADIENT,
                    )
    if rows is not None:
        _assert_selection(case, rows, results)


def _assert_selection(case: Case, rows, results: list) -> None:
    """The rows outside the selection read 0 in the (donated) gradient; the selected rows' values are right."""
    unselected = torch.ones(case.rows, dtype=torch.bool)
    unselected[rows] = False
    with subtest(GRAD_LOGITS):
        for rank, result in enumerate(results):
            leftover = result["donated"]["grad"][unselected]
            if not bool((leftover == 0).all()):
                raise CheckFailure(
                    f"rank {rank}: {int((leftover != 0).any(dim=1).sum())} of {int(unselected.sum())} rows outside "
                    "the selection hold non-zero values in the donated gradient (the logits they held, or a "
                    "misplaced row)",
                    kind=GRADIENT,
                )
    ref, naive = expected.token_reference(case), expected.token_reference(case, precise=False)
    scale = value_scale(case.global_logits(), case.temperature)
    for key, want, naive_values in (
        (LOG_PROBS, ref.log_probs, naive.log_probs),
        (ENTROPY, ref.entropy, naive.entropy),
    ):
        if want is not None:
            with subtest(key):
                judge.value(
                    results[0]["donated"][key],
                    want[rows],
                    naive_values[rows],
                    what=f"{key} of the selected rows",
                    scale=scale,
                    working_dtype=case.torch_dtype,
                )
