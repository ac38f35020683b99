"""Rank-side jobs: what every rank runs for one Case, against one target.

A job receives ``{"case": json, "spec": target spec, ...}`` and a RankContext
(rank, TP/CP groups, tracer), rebuilds its own inputs from the Case, calls
the TARGET (never ``impl/`` directly), runs the backward of the probe (or
policy) loss with the Case's non-uniform upstream weights, and returns CPU
tensors and flags. The parent compares them with the float64 oracles.

Each job hands the target a fresh copy of the logits (``harness.jobs.inputs``:
an in-place write neither raises nor reaches the leaf the gradient is read
from) and reports what the historic bugs broke: whether that copy was left
bit-identical with an unchanged version counter (bug 2; read by the
inputs-unmutated checks only), and the ``requires_grad`` of every returned
tensor (bugs 1 and 4), plus the collective trace when the rank has a tracer
(bug 5).

Device (``harness.ranks.device``, ``LPH_DEVICE``): the Case draws every value on
the CPU; a job copies the tensors a trainer would hold on its GPU (logits,
targets and token ids, loss masks, probe weights, advantages, old log-probs)
to the rank's device, and its results come back as CPU tensors
(``@on_host``). On the CPU both are no-ops: the same tensor objects as before.
"""

from __future__ import annotations

import functools

import torch

from harness.cases import policy
from harness.cases.case import Case
from harness.jobs.inputs import Handed, reports_writes
from harness.ranks.device import to_device, to_host
from harness.targets import PackedInputs, load_target
from harness.targets.protocol import PolicyOptions


def packed_inputs(case: Case, on_device: bool = False) -> PackedInputs:
    """The Case's packed batch, target-neutral; ``on_device``: token ids and loss masks on the rank's device."""
    move = to_device if on_device else (lambda tensor: tensor)
    return PackedInputs(
        tokens=[move(tokens) for tokens in case.tokens()],
        total_lengths=case.total_lengths,
        response_lengths=case.response_lengths,
        loss_masks=[move(mask) for mask in case.loss_masks()],
        qkv_format=case.qkv_format,
        pad_multiple=case.pad_multiple,
        cp_mode=case.cp_mode,
    )


def in_view(values: list, case: Case, ctx) -> list:
    """Per-sample values restricted to this CP rank's zigzag view (all of them without CP)."""
    return [v[torch.tensor(view, dtype=torch.long)] for v, view in zip(values, case.views(ctx.cp_rank))]


def on_host(job):
    """Results of ``job`` as CPU tensors, whatever device it ran on (in-process world size 1 included)."""

    @functools.wraps(job)
    def wrapper(payload: dict, ctx) -> dict:
        return to_host(job(payload, ctx))

    return wrapper


def upstream_grad(weights: torch.Tensor, noncontiguous: bool) -> torch.Tensor:
    """fp32 upstream gradient on the rank's device; optionally a strided (non-contiguous) view of the same values."""
    weights = to_device(weights.float())
    if not noncontiguous:
        return weights
    holder = torch.zeros(weights.numel(), 2, device=weights.device)
    holder[:, 0] = weights
    return holder[:, 0]


def _leaf_logits(case: Case, ctx) -> torch.Tensor:
    return to_device(case.rank_logits(ctx.tp_rank, ctx.cp_rank)).requires_grad_()


def _backward(outputs: list, weights: list, noncontiguous: bool) -> None:
    """Backward of sum(w * out) through every output that carries a graph.

    EMPTY outputs are included, as a trainer's ``loss.backward()`` would
    include them: a CP rank whose zigzag view of a sample is empty still sits
    on the graph of the other ranks' collectives. Skipping them by size would
    be a data-dependent collective skip, the hang class of docs/bugs.md #5.
    """
    pairs = [
        (out, upstream_grad(w, noncontiguous))
        for out, w in zip(outputs, weights)
        if out is not None and out.requires_grad
    ]
    if pairs:
        torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])


def _grad(logits: torch.Tensor) -> torch.Tensor:
    return logits.grad if logits.grad is not None else torch.zeros_like(logits)


def _detach_all(values):
    return None if values is None else [v.detach().clone() for v in values]


def _requires_grad(values):
    return None if values is None else [bool(v.requires_grad) for v in values]


def _trace(ctx):
    return list(ctx.tracer.records) if getattr(ctx, "tracer", None) is not None else []


@on_host
@reports_writes
def token_job(payload: dict, ctx) -> dict:
    """Token level: log-probs/entropy of every row, backward of the row probe loss."""
    case = Case.from_json(payload["case"])
    target = load_target(payload["spec"])
    leaf, handed = _leaf_logits(case, ctx), Handed()
    log_probs, entropy = target.token_log_probs(
        handed.copy("logits", leaf),
        to_device(case.row_targets()),
        tp_group=ctx.tp_group,
        chunk_size=case.chunk_size,
        with_entropy=case.with_entropy,
        entropy_grad=payload.get("entropy_grad", True),
        temperature=case.temperature,
    )
    a, b = case.row_probe_weights()
    _backward([log_probs, entropy], [a, b], case.noncontig_grads)
    return {
        "log_probs": log_probs.detach().clone(),
        "entropy": None if entropy is None else entropy.detach().clone(),
        "entropy_requires_grad": None if entropy is None else bool(entropy.requires_grad),
        "grad": _grad(leaf),
        "trace": _trace(ctx),
        **handed.report(),
    }


@on_host
@reports_writes
def packed_job(payload: dict, ctx) -> dict:
    """Packed level: per-sample outputs, backward of the probe loss of docs/math.md."""
    case = Case.from_json(payload["case"])
    target = load_target(payload["spec"])
    leaf, handed = _leaf_logits(case, ctx), Handed()
    log_probs, entropy = target.packed_log_probs(
        handed.copy("logits", leaf),
        packed_inputs(case, on_device=True),
        tp_group=ctx.tp_group,
        cp_group=ctx.cp_group,
        chunk_size=case.chunk_size,
        with_entropy=case.with_entropy,
        entropy_grad=payload.get("entropy_grad", True),
        temperature=case.temperature,
        response_only=case.response_only,
        loss_mask_only=case.loss_mask_only,
    )
    a, b = (in_view(weights, case, ctx) for weights in case.probe_weights())
    outputs = list(log_probs) + (list(entropy) if entropy is not None else [])
    weights = list(a) + (list(b) if entropy is not None else [])
    _backward(outputs, weights, case.noncontig_grads)
    return {
        "log_probs": _detach_all(log_probs),
        "entropy": _detach_all(entropy),
        "log_probs_requires_grad": _requires_grad(log_probs),
        "entropy_requires_grad": _requires_grad(entropy),
        "grad": _grad(leaf),
        "trace": _trace(ctx),
        **handed.report(),
    }


def policy_options(case: Case, ctx) -> dict:
    """``{"options": PolicyOptions}`` for a Case with loss options, else ``{}`` (a plain-signature adapter still works).

    The reference and rollout log-probs are this rank's view, like the advantages.
    """
    values = policy.option_values(case)
    if PolicyOptions(**values) == PolicyOptions():
        return {}
    opts = policy.loss_options(case)

    def sent(values):
        return [to_device(v.float()) for v in in_view(values, case, ctx)]

    return {
        "options": PolicyOptions(
            **values,
            ref_log_probs=sent(policy.ref_log_probs(case)) if opts.kl_coef != 0 else None,
            rollout_log_probs=sent(policy.rollout_log_probs(case)) if opts.rollout_correction else None,
        )
    }


@on_host
@reports_writes
def policy_job(payload: dict, ctx) -> dict:
    """Policy path: the policy loss (PPO by default) with entropy bonus; the target decides the entropy gate.

    Besides the end-to-end gradient, the gradients of the loss w.r.t. the log-probs and entropy the target
    RETURNED (``None`` where those tensors are not on the loss's graph): what the loss does with its inputs,
    judged apart from how the log-probs were computed (``harness.checks.policy``).
    """
    case = Case.from_json(payload["case"])
    leaf, handed = _leaf_logits(case, ctx), Handed()
    loss, log_probs, entropy = _policy_forward_backward(payload, case, ctx, handed.copy("logits", leaf))
    return {
        "loss": loss.detach().clone(),
        "log_probs": _detach_all(log_probs),
        "entropy": _detach_all(entropy),
        "log_probs_requires_grad": _requires_grad(log_probs),
        "entropy_requires_grad": _requires_grad(entropy),
        "entropy_grad_fn_is_none": None if entropy is None else [e.grad_fn is None for e in entropy],
        "grad": _grad(leaf),
        "grad_log_probs": _retained_grads(log_probs),
        "grad_entropy": _retained_grads(entropy),
        "trace": _trace(ctx),
        **handed.report(),
    }


def _retain(values) -> None:
    for value in values or ():
        if value.requires_grad and not value.is_leaf:
            value.retain_grad()


def _retained_grads(values):
    """Per sample, the gradient a backward left on a returned output; None if any output had none."""
    if values is None:
        return None
    grads = [v.grad for v in values]
    if any(g is None for g, v in zip(grads, values) if v.numel()):
        return None
    return [torch.zeros_like(v.detach()) if g is None else g.detach().clone() for g, v in zip(grads, values)]


def _policy_forward_backward(payload: dict, case: Case, ctx, logits: torch.Tensor):
    """The target's policy loss on ``logits`` with the Case's inputs, then its backward; the target's outputs."""
    target = load_target(payload["spec"])
    loss, log_probs, entropy = target.policy_loss(
        logits,
        packed_inputs(case, on_device=True),
        advantages=[to_device(a.float()) for a in in_view(case.advantages(), case, ctx)],
        old_log_probs=[to_device(o.float()) for o in in_view(policy.old_log_probs(case), case, ctx)],
        eps_clip=policy.EPS_CLIP,
        eps_clip_high=policy.EPS_CLIP_HIGH,
        entropy_coef=case.entropy_coef,
        with_entropy=case.with_entropy,
        tp_group=ctx.tp_group,
        cp_group=ctx.cp_group,
        chunk_size=case.chunk_size,
        temperature=case.temperature,
        response_only=case.response_only,
        loss_mask_only=case.loss_mask_only,
        **policy_options(case, ctx),
    )
    if loss.requires_grad and payload.get("backward", True):
        _retain(log_probs)
        _retain(entropy)
        loss.backward()
    return loss, log_probs, entropy


@on_host
def shared_logits_job(payload: dict, ctx) -> dict:
    """Bug 2: several consumers of the SAME logits (and an overlapping view) in one graph.

    Log-probs unchunked with entropy, log-probs chunked, and log-probs plus
    entropy of ``logits[1:]`` (a view sharing storage and version counter),
    all with the entropy gradient on; one backward, or (``payload['backwards']
    == 2``) one with ``retain_graph=True`` and then a second. Any in-place
    write on the saved logits makes a later unpack raise the version-counter
    error, or perturbs the values; an in-place write on a Function's own saved
    tensors breaks only the second backward.
    """
    case = Case.from_json(payload["case"])
    target = load_target(payload["spec"])
    leaf, handed = _leaf_logits(case, ctx), Handed()
    logits = handed.copy("logits", leaf)  # one copy, shared by every consumer: the sharing is the point
    targets = to_device(case.row_targets())
    options = dict(tp_group=ctx.tp_group, entropy_grad=True, temperature=case.temperature)
    log_probs, entropy = target.token_log_probs(logits, targets, chunk_size=None, with_entropy=True, **options)
    chunked, _ = target.token_log_probs(
        logits, targets, chunk_size=payload["chunk_size"], with_entropy=False, **options
    )
    view_log_probs, view_entropy = target.token_log_probs(
        logits[1:], targets[1:], chunk_size=payload["chunk_size"], with_entropy=True, **options
    )
    after_forward = handed.report()
    a, b = (to_device(w.float()) for w in case.row_probe_weights())
    loss = (
        (a * log_probs).sum()
        + (b * entropy).sum()
        + (a * chunked).sum()
        + (a[1:] * view_log_probs).sum()
        + (b[1:] * view_entropy).sum()
    )
    grads = []
    for remaining in reversed(range(payload["backwards"])):
        loss.backward(retain_graph=remaining > 0)
        grads.append(leaf.grad.clone())
        leaf.grad = None
    return {
        "values": [v.detach().clone() for v in (log_probs, entropy, chunked, view_log_probs, view_entropy)],
        "grads": grads,
        "after_forward": after_forward,
        **handed.report(),
    }


def selected_rows(case: Case) -> torch.Tensor | None:
    """The token-level row selection a response-only (loss-mask-only) Case stands for; None: every row.

    The rows predicting the response tokens (``Case.response_rows``), and with
    ``loss_mask_only`` only those whose loss mask is 1: the rows a trainer's
    response-only evaluation passes as ``rows=`` (possibly none at all).
    """
    if not case.response_only:
        return None
    rows = [row for sample in case.response_rows() for row in sample]
    if case.loss_mask_only:
        keep = torch.cat([mask.bool() for mask in case.loss_masks()] + [torch.zeros(0, dtype=torch.bool)])
        rows = [row for row, kept in zip(rows, keep.tolist(), strict=True) if kept]
    return torch.tensor(rows, dtype=torch.long)


def _donation_run(
    case: Case, ctx, target, donate: bool, consumer: str | None = None, twice: bool = False, rows=None
) -> dict:
    """One token-level forward+backward; ``consumer`` adds another node that saves the logits, before or after.

    ``rows`` (a ``selected_rows`` index): only those rows are evaluated (the
    target's ``rows=``), with their targets and probe weights.
    """
    logits = _leaf_logits(case, ctx)
    extra = {"donate_logits": True} if donate else {}
    targets, (a, b) = case.row_targets(), case.row_probe_weights()
    if rows is not None:
        extra["rows"] = to_device(rows)
        targets, a, b = targets[rows], a[rows], b[rows]
    other = logits.pow(2).sum() if consumer == "before" else None
    log_probs, entropy = target.token_log_probs(
        logits,
        to_device(targets),
        tp_group=ctx.tp_group,
        chunk_size=case.chunk_size,
        with_entropy=True,
        entropy_grad=True,
        temperature=case.temperature,
        **extra,
    )
    if consumer == "after":
        other = logits.pow(2).sum()
    a, b = to_device(a.float()), to_device(b.float())
    loss = (a * log_probs).sum() + (b * entropy).sum() + (other if other is not None else 0.0)
    try:
        loss.backward(retain_graph=twice)
        if twice:
            loss.backward()
    except RuntimeError as exc:
        return {"error": str(exc).splitlines()[0]}
    return {
        "error": None,
        "log_probs": log_probs.detach().clone(),
        "entropy": entropy.detach().clone(),
        "grad": logits.grad.clone(),
    }


@on_host
def donation_job(payload: dict, ctx) -> dict:
    """Donation (writing the gradient over the logits) against the same computation without it.

    A response-only Case evaluates its ``selected_rows`` only, in every
    scenario: donation combined with row selection, where the rows never
    read must come back as exactly 0 although the buffer held logits.
    """
    case = Case.from_json(payload["case"])
    target = load_target(payload["spec"])
    run = functools.partial(_donation_run, case, ctx, target, rows=selected_rows(case))
    scenarios = {
        "plain": run(donate=False),
        "donated": run(donate=True),
        "twice": run(donate=True, twice=True),
    }
    for consumer in ("before", "after"):
        scenarios[f"consumer_{consumer}"] = run(donate=False, consumer=consumer)
        scenarios[f"donated_consumer_{consumer}"] = run(donate=True, consumer=consumer)
    return {**scenarios, "trace": _trace(ctx)}
