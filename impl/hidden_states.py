"""Log-probs and entropy from hidden states and a vocab-sharded LM head, without ``[rows, V_local]`` logits.

``z = hidden @ weight.T / temperature`` (docs/math.md, "Hidden states and a sharded
LM head"): ``hidden [rows, H]`` is replicated over the TP group, ``weight
[V_local, H]`` is this rank's head shard (vocabulary ids ``[r*V_local,
(r+1)*V_local)``). The fused path computes the logits one block of
``MATMUL_BLOCK_ROWS`` rows at a time and never holds more than two fp32
``[block, V_local]`` buffers (plus, in backward, an fp32 ``[chunk, H]`` partial
of ``grad_hidden``), so a trainer no longer pays for the full logits; the
chunk is the unit of the backward's TP sum. Decisions, and the bugs behind them:

* **The token-level statistics, computed per block.** Each block's logits
  go through the same per-row statistics as ``impl.token_level``, the
  same code (``impl.row_stats``: ``sum exp``, ``sum exp * shift``, the
  target's shifted logit, ``0 log 0 = 0`` by the same clamp; the outputs,
  the backward's ``dL/dz`` and the rank-order TP sums), shifted by the
  GLOBAL row max as there: the forward computes each block's logits twice,
  once for the row max (then the MAX all-reduce) and once for the
  statistics, so every ``exp(z - m)`` and the row sums' tree are those of the
  logits path whatever the TP degree (docs/topology.md). Shifting by the
  rank-local max and rescaling afterwards saved that matmul but made a
  row's bits depend on the TP degree. Two forward collectives per call, as on the logits path: the MAX
  all-reduce and the rank-order all-gather of the stacked statistics; their
  number and shapes never depend on the data (the hang class of docs/bugs.md #5).
* **Matmuls of one shape** (``impl.fixed_gemm``). A BLAS matmul does not
  give a row the same bits when the number of rows or columns in the call
  changes (measured on this CPU: ``h[i:i+1] @ W.T`` differs from row ``i``
  of ``h @ W.T``). So every matmul runs on blocks of ``MATMUL_BLOCK_ROWS``
  rows aligned to absolute row indices (the last one zero-padded) and one
  leaf block of the global vocabulary at a time, and chunk boundaries are
  rounded up to a multiple of the row block. That makes log-probs, entropy,
  ``grad_hidden`` AND ``grad_weight`` (accumulated block by block, always
  in the same order) bit-identical for every chunk size, and values and
  ``grad_hidden`` the same bits for a row in any batch and at every
  power-of-two TP degree (docs/topology.md).
* **Backward recomputes, never stores, the logits.** Per block it recomputes
  ``z``, turns it into ``dL/dz`` in place exactly as the token-level
  backward does (``-p * (g_lp + g_H (log p + H))`` plus ``g_lp`` at the target
  column with ``add_at_target``: no one_hot, no ``[rows, V]`` integer tensor,
  docs/bugs.md #3), then ``grad_hidden[chunk] = g @ W`` and ``grad_weight += g.T @ h``.
* **grad_hidden is summed over TP in rank order.** Each rank holds one
  column block of the sum ``sum_r g_r W_r`` (itself summed leaf by leaf by
  the statistics' tree); per chunk the ranks all-gather their fp32 partials
  and add them as the tree's top, so every rank returns the
  same bits and the sum never depends on the chunking (a ring all-reduce's
  rounding depends on an element's position in the buffer). One collective
  per chunk, a count fixed by ``rows`` and ``chunk_size``, identical on all ranks.
* **Precision.** The matmuls run in the inputs' dtype (as the trainer's LM
  head does; BLAS accumulates bf16/fp16 in fp32), the softmax statistics in
  fp32, and ``grad_weight`` accumulates in an fp32 ``[V_local, H]`` buffer
  (bf16 accumulation over thousands of chunks would lose the gradient); it is
  returned in the weight's dtype. Outputs are fp32.
* **Inputs are never written** (docs/bugs.md #2): only private buffers are
  modified in place; the entropy gate only marks the entropy output
  non-differentiable, so its values are bit-identical either way (docs/bugs.md #1).
"""

from __future__ import annotations

import torch

from .fixed_gemm import MATMUL_BLOCK_ROWS, FixedShapeGemm
from .row_stats import (
    add_at_target,
    all_reduce_max,
    backward_terms,
    exp_sums,
    finish,
    grad_of_log_p,
    leaf_blocks,
    shard_targets,
    sum_in_rank_order,
    tp_world,
)
from .validation import validate_hidden_inputs


def hidden_chunk_bounds(rows: int, chunk_size: int | None) -> list[tuple[int, int]]:
    """Row ranges of the chunk loop: ``chunk_size`` rounded UP to a multiple of ``MATMUL_BLOCK_ROWS``.

    ``None`` or a chunk covering every row is one chunk (SkyRL #1650's fix).
    Rounding keeps every block whole, which is what makes results
    independent of the chunk size bit for bit.
    """
    if chunk_size is None or chunk_size >= rows:
        return [(0, rows)]
    step = -(-chunk_size // MATMUL_BLOCK_ROWS) * MATMUL_BLOCK_ROWS
    return [(start, min(start + step, rows)) for start in range(0, rows, step)]


def _blocks(start: int, end: int):
    """The matmul blocks of the chunk ``[start, end)`` (chunk starts are multiples of the block)."""
    for block in range(start, end, MATMUL_BLOCK_ROWS):
        yield block, min(block + MATMUL_BLOCK_ROWS, end)


def _block_logits(gemm: FixedShapeGemm, start: int, end: int, temperature: float, out: torch.Tensor) -> torch.Tensor:
    """``out`` (fp32 ``[end-start, V_local]``) := ``hidden[start:end] @ weight.T / temperature``: ONE block."""
    gemm.logits(start, end, out)
    if temperature != 1.0:
        out.div_(temperature)
    return out


def _workspace(rows: int, vocab_local: int, device) -> torch.Tensor:
    """Two private fp32 ``[block, V_local]`` buffers every block reuses (no allocator churn)."""
    return torch.empty(2, max(min(rows, MATMUL_BLOCK_ROWS), 1), vocab_local, dtype=torch.float32, device=device)


class FusedHiddenLogProbEntropy(torch.autograd.Function):
    """``(log_probs, entropy)`` from hidden states and a vocab-sharded head; see the module docstring."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        v_local = weight.shape[0]
        rows = hidden.shape[0]
        tp_size, tp_rank = tp_world(tp_group)

        in_shard, gather_index = shard_targets(targets, tp_rank, v_local)

        stats = torch.zeros(rows, 3 if with_entropy else 2, dtype=torch.float32, device=hidden.device)
        global_max = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        workspace = _workspace(rows, v_local, hidden.device)
        blocks = leaf_blocks(v_local, tp_size)
        gemm = FixedShapeGemm(hidden, weight, blocks)
        for start, end in _blocks(0, rows):
            logits = _block_logits(gemm, start, end, temperature, workspace[0, : end - start])
            torch.amax(logits, dim=1, out=global_max[start:end])
        all_reduce_max(global_max, tp_group)
        for start, end in _blocks(0, rows):
            logits = _block_logits(gemm, start, end, temperature, workspace[0, : end - start])
            shifted = logits.sub_(global_max[start:end].unsqueeze(1))
            target_shift = shifted.gather(1, gather_index[start:end]).squeeze(1)
            stats[start:end, 1] = torch.where(in_shard[start:end], target_shift, 0.0)
            exp_sums(stats[start:end], shifted, workspace[1, : end - start], with_entropy, blocks)
        del workspace, gemm
        stats = sum_in_rank_order(stats, tp_group)
        log_probs, entropy = finish(stats, with_entropy)

        ctx.save_for_backward(hidden, weight, targets, global_max, stats)
        ctx.chunk_size, ctx.temperature, ctx.tp_group, ctx.tp_rank = chunk_size, temperature, tp_group, tp_rank
        ctx.leaves = blocks
        if with_entropy and not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, targets, global_max, stats = ctx.saved_tensors
        v_local, rows = weight.shape[0], hidden.shape[0]
        temperature = ctx.temperature
        shift, grad_log_probs, grad_entropy, entropy = backward_terms(stats, global_max, grad_log_probs, grad_entropy)
        in_shard, scatter_index = shard_targets(targets, ctx.tp_rank, v_local)
        target_grad = torch.where(in_shard, grad_log_probs, 0.0).unsqueeze(1)

        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        weight_acc = torch.zeros(v_local, hidden.shape[1], dtype=torch.float32, device=hidden.device)
        workspace = _workspace(rows, v_local, hidden.device)
        gemm = FixedShapeGemm(hidden, weight, ctx.leaves)
        for start, end in hidden_chunk_bounds(rows, ctx.chunk_size):
            partial = torch.empty(end - start, hidden.shape[1] if want_hidden else 0, device=hidden.device)
            for block_start, block_end in _blocks(start, end):
                grad_z = _block_logits_grad(
                    gemm,
                    block_start,
                    block_end,
                    temperature,
                    workspace,
                    shift,
                    scatter_index,
                    target_grad,
                    grad_log_probs,
                    grad_entropy,
                    entropy,
                )
                gemm.backward_block(
                    grad_z,
                    block_start,
                    block_end,
                    partial[block_start - start : block_end - start] if want_hidden else None,
                    weight_acc if want_weight else None,
                )
            if want_hidden:
                grad_hidden[start:end].copy_(sum_in_rank_order(partial, ctx.tp_group))
        del workspace, gemm
        grad_weight = None
        if want_weight:
            grad_weight = weight_acc if weight.dtype == torch.float32 else weight_acc.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None, None


def _block_logits_grad(
    gemm, start, end, temperature, workspace, shift, scatter_index, target_grad, g_lp, g_h, entropy
) -> torch.Tensor:
    """``dL/dz`` of the block ``[start, end)`` (``/ temperature`` included), recomputed in the private workspace.

    ``impl.row_stats.grad_of_log_p``, as in ``impl.token_level``: no one_hot,
    the target's term added with ``add_at_target``.
    """
    log_p = _block_logits(gemm, start, end, temperature, workspace[0, : end - start])
    log_p.sub_(shift[start:end].unsqueeze(1))
    block_grads = [None if grad is None else grad[start:end] for grad in (g_lp, g_h, entropy)]
    grad_z = grad_of_log_p(log_p, workspace[1, : end - start], *block_grads)
    add_at_target(grad_z, scatter_index[start:end], target_grad[start:end])
    if temperature != 1.0:
        grad_z.div_(temperature)
    return grad_z


def hidden_log_probs_and_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    tp_group=None,
    chunk_size: int | None = None,
    with_entropy: bool = True,
    entropy_grad: bool = True,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-row log-prob of ``targets`` and entropy of ``softmax(hidden @ W_full.T / temperature)``.

    Args:
        hidden: ``[rows, H]`` float32/bfloat16/float16, the same on every TP rank.
        weight: ``[V_local, H]`` (same dtype), this rank's LM-head shard: the
            head's rows for vocabulary ids ``[rank*V_local, (rank+1)*V_local)``.
        targets: ``[rows]`` integer GLOBAL token ids in ``[0, V_local*tp)``.
        tp_group: the tensor-parallel process group; ``None`` means one rank.
        chunk_size: rows per chunk of logits (rounded up to a multiple of
            ``MATMUL_BLOCK_ROWS``); ``None`` is one chunk.
        with_entropy: compute the entropy (else ``None`` is returned for it).
        entropy_grad: when False the entropy is returned without a graph
            (bit-identical values).
        temperature: logits are divided by it before the softmax.

    Returns:
        ``(log_probs, entropy)`` float32 ``[rows]`` (entropy may be None);
        gradients reach ``hidden`` (summed over TP, identical on every rank)
        and ``weight`` (this rank's shard).
    """
    validate_hidden_inputs(hidden, weight, targets, tp_group, chunk_size, temperature)
    return FusedHiddenLogProbEntropy.apply(
        hidden, weight, targets, tp_group, chunk_size, bool(with_entropy), bool(entropy_grad), float(temperature)
    )
