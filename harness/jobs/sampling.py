"""Rank-side job of the sampling-replay checks: one call of ``sampling_log_probs`` per rank, then its backward.

Each rank rebuilds the Case, its logits shard, the sampled tokens and the kept
set in the Case's form (``harness.cases.sampling``), calls the TARGET, runs
the backward of the row probe loss ``sum(a * lp + b * H)`` and reports what
the token job reports (values, gradient shard, ``requires_grad``, logits
untouched, the collective trace) plus whether the kept-set tensors were left
untouched (both read by the inputs-unmutated check only: the target gets a
fresh copy of the logits, ``harness.jobs.inputs``). An error the target raises is caught and returned (type and text)
so the parent can require the SAME clear error on every rank, for a target
outside ``K`` under ``on_outside="error"`` and for the bad-input rows; a
collective timeout is re-raised (it is a hang, not an answer).

``sampling_packed_job`` is the packed-level twin (``sampling_packed_log_probs``):
this rank's CP rows of the logits, the packed batch whose response tokens are
the sampled tokens, ``K`` sliced to the response rows the rank holds, and the
backward of the packed probe loss over the rank's zigzag view.
"""

from __future__ import annotations

import torch

from harness.cases import sampling
from harness.cases.case import Case
from harness.jobs.inputs import Handed, reports_writes
from harness.jobs.logits import _backward, _detach_all, _grad, _leaf_logits, _requires_grad, _trace, in_view, on_host
from harness.ranks.device import to_device
from harness.ranks.errors import is_collective_timeout
from harness.targets import KeptSet, PackedInputs, load_target

KEPT_TENSORS = ("ids", "offsets", "dense")


def _on_device(kept: KeptSet) -> KeptSet:
    moved = {name: getattr(kept, name) for name in ("top_k", "top_p", "min_p")}
    for name in KEPT_TENSORS:
        value = getattr(kept, name)
        moved[name] = None if value is None else to_device(value)
    return KeptSet(**moved)


def _watch_kept(handed: Handed, kept: KeptSet) -> KeptSet:
    for name in KEPT_TENSORS:
        if getattr(kept, name) is not None:
            handed.watch(f"kept set ({name})", getattr(kept, name))
    return kept


# Bad kept sets (the parent's bad-input table): name -> KeptSet of the Case -> the broken one.
BAD_KEPT = {
    "offsets_not_monotone": lambda k: KeptSet(ids=k.ids, offsets=k.offsets[[0, 2, 1, *range(3, len(k.offsets))]]),
    "id_out_of_range": lambda k: KeptSet(ids=torch.cat([k.ids[:-1], k.ids.new_tensor([10**6])]), offsets=k.offsets),
    "negative_id": lambda k: KeptSet(ids=torch.cat([k.ids[:-1], k.ids.new_tensor([-1])]), offsets=k.offsets),
    "offsets_wrong_length": lambda k: KeptSet(ids=k.ids, offsets=k.offsets[:-1]),
    "top_k_zero": lambda k: KeptSet(top_k=0),
    "top_k_negative": lambda k: KeptSet(top_k=-1),
    "top_p_zero": lambda k: KeptSet(top_p=0.0),
    "top_p_above_one": lambda k: KeptSet(top_p=1.5),
    "min_p_above_one": lambda k: KeptSet(min_p=1.5),
}


@on_host
@reports_writes
def sampling_job(payload: dict, ctx) -> dict:
    """One sampling call on this rank (``payload["bad"]``: a BAD_KEPT row replaces the kept set)."""
    case = Case.from_json(payload["case"])
    target = load_target(payload["spec"])
    s = sampling.spec(case)
    leaf, handed = _leaf_logits(case, ctx), Handed()
    logits = handed.copy("logits", leaf)
    kept = sampling.kept_set(case, ctx.tp_rank)
    if payload.get("bad"):
        kept = BAD_KEPT[payload["bad"]](kept)
    kept = _watch_kept(handed, _on_device(kept))
    _, targets = sampling.kept_and_targets(case)
    try:
        log_probs, entropy = target.sampling_log_probs(
            logits,
            to_device(targets),
            kept,
            tp_group=ctx.tp_group,
            chunk_size=case.chunk_size,
            with_entropy=case.with_entropy,
            entropy_grad=payload.get("entropy_grad", True),
            temperature=case.temperature,
            on_outside=s["on_outside"],
        )
    except Exception as exc:  # judged by the parent: an error is the right answer for some Cases
        return _error(exc, ctx)
    a, b = case.row_probe_weights()
    _backward([log_probs, entropy], [a, b], case.noncontig_grads)
    return {
        "error_type": None,
        "error": None,
        "log_probs": log_probs.detach().clone(),
        "entropy": None if entropy is None else entropy.detach().clone(),
        "entropy_requires_grad": None if entropy is None else bool(entropy.requires_grad),
        "grad": _grad(leaf),
        "trace": _trace(ctx),
        **handed.report(),
    }


def _error(exc: Exception, ctx) -> dict:
    if is_collective_timeout(f"{type(exc).__name__}: {exc}"):
        raise exc
    return {"error_type": type(exc).__name__, "error": str(exc), "trace": _trace(ctx), **Handed.current_report()}


def sampling_inputs(case: Case, on_device: bool = True) -> PackedInputs:
    """The Case's packed batch with the sampled tokens as its responses."""
    move = to_device if on_device else (lambda tensor: tensor)
    return PackedInputs(
        tokens=[move(tokens) for tokens in sampling.packed_tokens(case)],
        total_lengths=case.total_lengths,
        response_lengths=case.response_lengths,
        loss_masks=[move(mask) for mask in case.loss_masks()],
        qkv_format=case.qkv_format,
        pad_multiple=case.pad_multiple,
        cp_mode=case.cp_mode,
    )


@on_host
@reports_writes
def sampling_packed_job(payload: dict, ctx) -> dict:
    """One packed sampling call on this rank, then the backward of the packed probe loss over its view.

    ``payload["unsliced"]``: every CP rank is handed the whole batch's ``K`` (a bad input).
    """
    case = Case.from_json(payload["case"])
    target = load_target(payload["spec"])
    leaf, handed = _leaf_logits(case, ctx), Handed()
    logits = handed.copy("logits", leaf)
    kept = sampling.kept_set(case, ctx.tp_rank, ctx.cp_rank, held_only=not payload.get("unsliced"))
    kept = _watch_kept(handed, _on_device(kept))
    try:
        log_probs, entropy = target.sampling_packed_log_probs(
            logits,
            sampling_inputs(case),
            kept,
            tp_group=ctx.tp_group,
            cp_group=ctx.cp_group,
            chunk_size=case.chunk_size,
            with_entropy=case.with_entropy,
            entropy_grad=payload.get("entropy_grad", True),
            temperature=case.temperature,
            on_outside=sampling.spec(case)["on_outside"],
        )
    except Exception as exc:  # judged by the parent, as in sampling_job
        return _error(exc, ctx)
    a, b = (in_view(weights, case, ctx) for weights in case.probe_weights())
    outputs = list(log_probs) + (list(entropy) if entropy is not None else [])
    weights = list(a) + (list(b) if entropy is not None else [])
    _backward(outputs, weights, case.noncontig_grads)
    return {
        "error_type": None,
        "error": None,
        "log_probs": _detach_all(log_probs),
        "entropy": _detach_all(entropy),
        "log_probs_requires_grad": _requires_grad(log_probs),
        "entropy_requires_grad": _requires_grad(entropy),
        "grad": _grad(leaf),
        "trace": _trace(ctx),
        **handed.report(),
    }
