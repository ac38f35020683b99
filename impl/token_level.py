"""Fused, chunked, vocab-parallel log-probs and entropy (token level).

One autograd Function computes both quantities for logits whose vocabulary is
sharded across a tensor-parallel group (docs/math.md, "Tensor parallelism over the
vocabulary"). Design decisions, each tied to a historic bug (docs/bugs.md):

* Two collectives per call, whatever the chunking: one MAX of the row maxima,
  then one all-gather of stacked per-row statistics ``[sum_exp,
  sum_exp*shift, target_shift]``, added in rank order (bit-reproducible
  whatever the batch's composition, see ``impl.row_stats``). The
  collective sequence never depends on the data, on the weights or on
  which chunks are "interesting", so TP ranks cannot diverge
  (the hang class of bug 5). The backward issues none: once the global row
  statistics are known, each rank's gradient is its own column slice.
* The inputs are never written (bug 2, "borrow then restore" on saved logits):
  every chunk is first copied to a private fp32 buffer, and only that buffer
  is modified in place.
* The backward never builds ``one_hot`` nor any ``[rows, V]`` integer tensor
  (bug 3): it recomputes ``p`` per chunk from the saved row statistics,
  writes ``-p * coef`` into the gradient buffer and adds the log-prob
  gradient at the target column with ``add_at_target`` (gather, add, scatter).
* The entropy-gradient gate (bug 1) only marks the entropy output
  non-differentiable: the values come from the very same computation, so they
  are bit-identical with and without the gradient.
* ``0 * log 0 = 0``: vocabulary entries at ``-inf`` contribute nothing to the
  entropy or its gradient, never NaN (SkyRL #2259).
* A target outside ``[0, V)`` is an error, not a silent log-prob of 0.
* Before its two collectives, a call at tp > 1 all-gathers a small
  fingerprint of its metadata over the TP group (``impl.agreement``): TP
  ranks holding shards of different widths, different row counts or
  options, or one rank with bad input, raise the same clear error on every
  rank instead of hanging in a mismatched all-gather.
* The same bits on every topology (docs/topology.md): the row max is
  all-reduced BEFORE any exponential, so every element's ``exp(z - m)`` is
  the same whatever the layout, and the row sums follow ONE tree over the
  global column index (``impl.row_stats.row_sum`` and ``leaf_blocks``) whose
  subtrees are the TP shards, the rank combination being its top. Only
  elementwise adds: ``torch.sum``'s order follows the launch shape on CUDA
  (seen on an H100 by ``nox -s gpu``: one last bit at chunk_size=1 vs one
  chunk) and the thread split on the CPU. So a row's log-prob, entropy and
  gradient do not depend on the chunk size, the other rows of the call, the
  row's position, the CP layout, or the (power-of-two) TP degree.
* Two backends for the passes over ``[rows, V_local]`` (``impl.backend``):
  the torch chunk loop below, and fused Triton kernels (``impl.triton``,
  one read forward, one read and one write backward) chosen for CUDA
  tensors. Everything above the passes (validation, agreement, the TP
  combination of ``impl.row_stats``, the outputs, the gate) is shared.
"""

from __future__ import annotations

import torch

from .agreement import TOKEN_CALL_FIXES, agree, token_call_fields
from .backend import TRITON, resolve_backend, triton_backend
from .row_stats import (
    add_at_target,
    all_reduce_max,
    backward_terms,
    chunk_bounds,
    exp_sums,
    finish,
    grad_of_log_p,
    gradient_buffer,
    leaf_blocks,
    shard_targets,
    sum_in_rank_order,
    tp_world,
)
from .validation import validate_token_inputs


def cache_friendly_chunk_rows(vocab_local: int, elements: int = 2**20) -> int:
    """A chunk size whose fp32 working buffers (4 MiB each by default) stay in cache.

    On CPU the chunk loop's elementwise passes then run from cache instead of
    DRAM: several times faster than one big chunk (see ``nox -s bench``).
    """
    return max(1, elements // max(vocab_local, 1))


def _workspace(rows: int, chunk_size: int | None, vocab_local: int, device) -> torch.Tensor:
    """The two private fp32 ``[chunk, V_local]`` buffers every chunk reuses (no allocator churn)."""
    chunk_rows = max(1, rows if chunk_size is None else min(chunk_size, rows))
    return torch.empty(2, chunk_rows, vocab_local, dtype=torch.float32, device=device)


def _shifted_rows(logits, rows, start: int, end: int, shift, temperature: float, out, scratch) -> torch.Tensor:
    """Fill the private fp32 buffer ``out`` with ``x / temperature - shift[:, None]`` for the chunk's rows.

    The chunk is ``rows[start:end]`` of ``logits`` (or ``start:end`` without
    ``rows``). Writing into a private buffer is what keeps the inputs
    untouched: everything after this point works in place on it only. At
    temperature 1 it is ONE pass (``x - shift`` promotes a bf16/fp16 chunk to
    fp32 on the fly, bit-identical to copying then subtracting). Selected
    rows are gathered straight into ``out`` (fp32) or, for bf16/fp16, into
    ``scratch`` (the other workspace buffer, free at this point), so
    row selection costs no extra allocation.
    """
    shift = shift.unsqueeze(1)
    if rows is None:
        chunk = logits[start:end]
    elif logits.dtype == torch.float32:
        chunk = torch.index_select(logits, 0, rows[start:end], out=out)
    else:
        staging = scratch.view(-1).view(logits.dtype)[: out.numel()].view(out.shape)
        chunk = torch.index_select(logits, 0, rows[start:end], out=staging)
    if temperature == 1.0:
        return torch.sub(chunk, shift, out=out)
    return out.copy_(chunk).div_(temperature).sub_(shift)


def _row_max(logits: torch.Tensor, rows: torch.Tensor | None, bounds, temperature: float) -> torch.Tensor:
    """Per-row maximum of ``logits / temperature`` (exact: division by t > 0 is monotone)."""
    if rows is None:
        # A row reduction allocates only [rows]: no chunking needed.
        return logits.amax(dim=1).float() / temperature
    maxima = [logits.index_select(0, rows[start:end]).amax(dim=1) for start, end in bounds]
    return torch.cat([logits.new_zeros(0)] + maxima).float() / temperature


def _unpack(ctx) -> tuple:
    """The saved tensors, refusing (clearly) to recompute from logits that were donated or modified."""
    if ctx.donated:
        raise RuntimeError(
            "donate_logits=True: the first backward wrote the gradient over the logits, so a second backward "
            "(retain_graph=True) cannot recompute from them; use donate_logits=False to backward twice"
        )
    try:
        return ctx.saved_tensors
    except RuntimeError as exc:
        if ctx.donate:
            raise RuntimeError(
                "donate_logits=True refused: the logits were modified in place after the forward (another "
                "consumer donated or wrote them); use donate_logits=False"
            ) from exc
        raise


def _torch_forward_stats(
    logits, row_index, bounds, chunk_size, tp_group, gather_index, in_shard, with_entropy, temperature
):
    """The torch backend's forward: the row max pass, its MAX all-reduce, then the chunk loop of statistics."""
    rows, v_local = gather_index.shape[0], logits.shape[1]
    row_max = _row_max(logits, row_index, bounds, temperature)
    all_reduce_max(row_max, tp_group)
    blocks = leaf_blocks(v_local, tp_world(tp_group)[0])
    stats = torch.zeros(rows, 3 if with_entropy else 2, dtype=torch.float32, device=logits.device)
    workspace = _workspace(rows, chunk_size, v_local, logits.device)
    for start, end in bounds:
        workspace_pair = workspace[0, : end - start], workspace[1, : end - start]
        shifted = _shifted_rows(logits, row_index, start, end, row_max[start:end], temperature, *workspace_pair)
        target_shift = shifted.gather(1, gather_index[start:end]).squeeze(1)
        stats[start:end, 1] = torch.where(in_shard[start:end], target_shift, 0.0)
        exp_sums(stats[start:end], shifted, workspace_pair[1], with_entropy, blocks)
    return row_max, stats


def _torch_backward(logits, row_index, shift, chunk_size, scatter_index, target_grad, grads, temperature, donate):
    """The torch backend's backward: ``p`` recomputed per chunk in a private buffer, then written out."""
    rows, v_local = shift.shape[0], logits.shape[1]
    grad_logits = gradient_buffer(logits, row_index, donate)
    workspace = _workspace(rows, chunk_size, v_local, logits.device)
    for start, end in chunk_bounds(rows, chunk_size):
        workspace_pair = workspace[0, : end - start], workspace[1, : end - start]
        log_p = _shifted_rows(logits, row_index, start, end, shift[start:end], temperature, *workspace_pair)
        block_grads = [None if grad is None else grad[start:end] for grad in grads]
        grad_chunk = grad_of_log_p(log_p, workspace_pair[1], *block_grads)
        del log_p
        add_at_target(grad_chunk, scatter_index[start:end], target_grad[start:end])
        if temperature != 1.0:
            grad_chunk.div_(temperature)
        if row_index is None:
            grad_logits[start:end].copy_(grad_chunk)
        else:
            grad_logits.index_copy_(0, row_index[start:end], grad_chunk.to(grad_logits.dtype))
    return grad_logits


class FusedLogProbEntropy(torch.autograd.Function):
    """``(log_probs, entropy)`` of vocab-sharded logits; see the module docstring.

    The per-row passes over ``[rows, V_local]`` run on the backend chosen by
    ``impl.backend`` (the torch chunk loop here, or the Triton kernels); the
    TP combination, the outputs and the entropy gate are the same code for both.
    """

    @staticmethod
    def forward(
        ctx, logits, targets, row_index, tp_group, chunk_size, with_entropy, entropy_grad, temperature, donate, backend
    ):
        v_local = logits.shape[1]
        _, tp_rank = tp_world(tp_group)
        bounds = chunk_bounds(targets.shape[0], chunk_size)

        in_shard, gather_index = shard_targets(targets, tp_rank, v_local)

        if backend == TRITON:
            row_max, stats = triton_backend().forward_stats(
                logits, row_index, targets, tp_group, tp_rank, in_shard, with_entropy, temperature
            )
        else:
            row_max, stats = _torch_forward_stats(
                logits, row_index, bounds, chunk_size, tp_group, gather_index, in_shard, with_entropy, temperature
            )
        stats = sum_in_rank_order(stats, tp_group)
        log_probs, entropy = finish(stats, with_entropy)

        ctx.save_for_backward(logits, targets, row_index, row_max, stats)
        ctx.chunk_size = chunk_size
        ctx.temperature = temperature
        ctx.tp_rank = tp_rank
        ctx.backend = backend
        ctx.donate, ctx.donated = donate, False
        if with_entropy and not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        logits, targets, row_index, row_max, stats = _unpack(ctx)
        shift, grad_log_probs, grad_entropy, entropy = backward_terms(stats, row_max, grad_log_probs, grad_entropy)
        grads = (grad_log_probs, grad_entropy, entropy)

        if ctx.backend == TRITON:
            grad_logits = triton_backend().backward(
                logits, row_index, targets, shift, grads, ctx.tp_rank, ctx.temperature, ctx.donate
            )
        else:
            in_shard, scatter_index = shard_targets(targets, ctx.tp_rank, logits.shape[1])
            target_grad = torch.where(in_shard, grad_log_probs, 0.0).unsqueeze(1)
            grad_logits = _torch_backward(
                logits, row_index, shift, ctx.chunk_size, scatter_index, target_grad, grads, ctx.temperature, ctx.donate
            )
        ctx.donated = ctx.donate
        return grad_logits, None, None, None, None, None, None, None, None, None


def log_probs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    tp_group=None,
    chunk_size: int | None = None,
    with_entropy: bool = True,
    entropy_grad: bool = True,
    temperature: float = 1.0,
    rows: torch.Tensor | None = None,
    donate_logits: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-row log-prob of ``targets`` and entropy of the full-vocabulary softmax.

    Args:
        logits: ``[rows, V_local]`` float32/bfloat16/float16, this rank's
            contiguous vocabulary shard ``[rank*V_local, (rank+1)*V_local)``.
        targets: ``[rows]`` integer GLOBAL token ids in ``[0, V_local*tp)``.
        tp_group: the tensor-parallel process group; ``None`` means one rank.
        chunk_size: rows per chunk of the working set; ``None`` is one chunk.
        with_entropy: compute the entropy (else ``None`` is returned for it).
        entropy_grad: when False the entropy is returned without a graph
            (``requires_grad`` False, bit-identical values).
        temperature: logits are divided by it before the softmax.
        rows: optional UNIQUE int64 row indices: evaluate only these rows
            (``targets`` then has one id per selected row). The rows are read
            chunk by chunk straight from ``logits``, so no compact copy of the
            selection is made, and the other rows get exactly zero gradient
            (response-only evaluation, slime PR #2076).
        donate_logits: write the gradient over the logits' own storage (peak
            about 1x logits plus a chunk instead of 2x), for trainers that no
            longer need the logits after the backward. Refused with a clear
            error, never silent corruption, on a second backward, and
            torch's version counter stops any other node that saved the
            logits from reading them afterwards.

    The passes over the logits run on the backend ``impl.backend`` picks:
    the fused Triton kernels for CUDA tensors when ``triton`` is installed,
    this module's torch code otherwise; ``impl.backend.use_backend`` forces one.

    Returns:
        ``(log_probs, entropy)`` as float32 tensors with one entry per
        evaluated row (entropy may be None).
    """
    local_error, backend = None, None
    try:
        validate_token_inputs(logits, targets, tp_group, chunk_size, temperature, rows)
        backend = resolve_backend(logits)
    except (ValueError, TypeError) as exc:
        local_error = exc
    agree(
        tp_group,
        "tp_group",
        token_call_fields(logits, rows, chunk_size, with_entropy, entropy_grad, temperature),
        local_error=local_error,
        device=logits.device if isinstance(logits, torch.Tensor) else "cpu",
        fix=TOKEN_CALL_FIXES,
    )
    return FusedLogProbEntropy.apply(
        logits,
        targets,
        rows,
        tp_group,
        chunk_size,
        bool(with_entropy),
        bool(entropy_grad),
        float(temperature),
        bool(donate_logits),
        backend,
    )
