"""Forward-only: every log-prob entry point under ``torch.no_grad()``, on inputs that do not require grad.

That is how every trainer computes its reference and old-policy log-probs (and
how a rollout's log-probs are recomputed), and it is a path of its own in
much upstream code: an autograd Function whose forward assumes a graph, a
``ctx.save_for_backward`` of a tensor that does not exist, a chunked path
taken only for training. The check calls the entry point twice on the same
Case in the same rank: with grad (leaf inputs requiring it) and forward-only
(fresh inputs that do not, under ``no_grad``). Forward-only must not raise,
must return no graph, and must return the same values, bit for bit: the
PPO ratio of the first step is ``exp(logp - old_logp)`` of the two, so a
forward-only path that rounds otherwise makes it differ from 1 on-policy.

Entry points: token (``token_log_probs``), packed (``packed_log_probs``) and
hidden states (``hidden_log_probs``); the policy losses are training-only,
the sampling entry points are checked by their own properties.
"""

from __future__ import annotations

import torch

from harness.cases.case import Case
from harness.cases.hidden import global_hidden, rank_weight
from harness.checks.failure import GRAPH, VALUE, ensure
from harness.checks.hidden import hidden_capabilities
from harness.checks.parity import replayable, require, required_capabilities
from harness.jobs.logits import on_host, packed_inputs
from harness.ranks.device import to_device
from harness.ranks.run import run_job
from harness.targets import load_target


def _call(target, level: str, case: Case, ctx, *, grad: bool):
    """The entry point's outputs as a flat list of tensors (None where absent).

    With ``grad`` the target gets a copy of a leaf, as every job hands it
    (``harness.jobs.inputs``): an in-place write is the inputs-unmutated
    check's finding, never a crash of this one.
    """
    leaf = (lambda tensor: to_device(tensor).requires_grad_().clone()) if grad else to_device
    options = dict(tp_group=ctx.tp_group, chunk_size=case.chunk_size, with_entropy=case.with_entropy, entropy_grad=True)
    if level == "token":
        out = target.token_log_probs(
            leaf(case.rank_logits(ctx.tp_rank, ctx.cp_rank)), to_device(case.row_targets()),
            temperature=case.temperature, **options,
        )  # fmt: skip
        return list(out)
    if level == "packed":
        log_probs, entropy = target.packed_log_probs(
            leaf(case.rank_logits(ctx.tp_rank, ctx.cp_rank)), packed_inputs(case, on_device=True),
            cp_group=ctx.cp_group, temperature=case.temperature, response_only=case.response_only,
            loss_mask_only=case.loss_mask_only, **options,
        )  # fmt: skip
        return [*log_probs, *(entropy if entropy is not None else [None] * len(log_probs))]
    out = target.hidden_log_probs(
        leaf(global_hidden(case)), leaf(rank_weight(case, ctx.tp_rank)), to_device(case.row_targets()),
        temperature=case.temperature, **options,
    )  # fmt: skip
    return list(out)


def _job(level: str):
    @on_host
    def job(payload: dict, ctx) -> dict:
        case = Case.from_json(payload["case"])
        target = load_target(payload["spec"])
        with_grad = [None if v is None else v.detach().clone() for v in _call(target, level, case, ctx, grad=True)]
        with torch.no_grad():
            forward_only = _call(target, level, case, ctx, grad=False)
        return {
            "with_grad": with_grad,
            "forward_only": [None if v is None else v.detach().clone() for v in forward_only],
            "graph": [v is not None and (v.requires_grad or v.grad_fn is not None) for v in forward_only],
        }

    job.__name__ = job.__qualname__ = f"{level}_forward_only_job"
    return job


token_forward_only_job = _job("token")
packed_forward_only_job = _job("packed")
hidden_forward_only_job = _job("hidden")


def assert_forward_only(results: list) -> None:
    """On every rank: no graph forward-only, and the grad-enabled call's values bit for bit."""
    for rank, result in enumerate(results):
        for index, (graph, given, expected) in enumerate(
            zip(result["graph"], result["forward_only"], result["with_grad"], strict=True)
        ):
            ensure(not graph, GRAPH, f"rank {rank}: output {index} carries a graph under torch.no_grad()")
            ensure(
                (given is None) == (expected is None), VALUE, f"rank {rank}: output {index} present on one side only"
            )
            if given is None:
                continue
            ensure(given.shape == expected.shape, VALUE, f"rank {rank}: output {index} has another shape forward-only")
            both_nan = given.isnan() & expected.isnan()  # a NaN the same on both sides is the same value here
            gap = (given.double() - expected.double()).abs().masked_fill(both_nan, 0).nan_to_num(nan=float("inf"))
            largest = gap.max().item() if gap.numel() else 0.0
            ensure(
                largest == 0.0,
                VALUE,
                f"rank {rank}: output {index} forward-only is not the grad-enabled call's (max |diff| {largest:.3g})",
            )


@replayable
def check_token_forward_only(case: Case, spec: str = "impl") -> None:
    """``token_log_probs`` under ``no_grad`` on inputs without grad: no error, no graph, the same values."""
    require(spec, required_capabilities(case, "token"))
    assert_forward_only(run_job(token_forward_only_job, case, spec))


@replayable
def check_packed_forward_only(case: Case, spec: str = "impl") -> None:
    """``packed_log_probs`` under ``no_grad`` on inputs without grad: no error, no graph, the same values."""
    require(spec, required_capabilities(case, "packed"))
    assert_forward_only(run_job(packed_forward_only_job, case, spec))


@replayable
def check_hidden_forward_only(case: Case, spec: str = "impl") -> None:
    """``hidden_log_probs`` under ``no_grad`` on inputs without grad: no error, no graph, the same values."""
    require(spec, hidden_capabilities(case))
    assert_forward_only(run_job(hidden_forward_only_job, case, spec))
