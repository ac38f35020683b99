"""The Triton kernels of the token-level Function, registered as torch custom ops.

Two kernels, each ONE pass over a row of ``[rows, V_local]`` (one program per
row, the columns in fixed tiles of ``BLOCK_V``):

* ``lph_triton::row_stats`` (forward, one read): online max, ``sum exp``,
  ``sum exp * shift`` and the target's logit, in fp32 whatever the input
  dtype, relative to the rank-LOCAL row max (the global max is not known
  during the pass; ``impl.row_stats.rescale_to_global_max`` moves them to it
  after the MAX all-reduce, as the hidden-state path does).
* ``lph_triton::write_grad`` (backward, one read and one write): ``dL/dz`` of
  log-prob and entropy from the saved row statistics, stored in the
  destination's dtype; the destination is the logits themselves when donating.

Contracts carried here (docs/triton.md):

* chunk invariance bit for bit: a row is reduced by its own program, and the
  order of its additions is fixed by the absolute column index alone (tile
  ``k`` holds columns ``[k*BLOCK_V, (k+1)*BLOCK_V)``, lane ``j`` accumulates
  column ``k*BLOCK_V + j``, one tree reduction of the lanes at the end);
  ``BLOCK_V`` depends on ``V_local``, the pass and whether the interpreter
  runs, never on how many rows a launch covers;
* ``0 log 0 = 0``: shifts are clamped to ``LOG_ZERO_FLOOR`` only where
  multiplied by an ``exp`` that is already exactly 0, so ``-inf`` columns
  (and a shard whose row is all ``-inf``) add 0, never NaN;
* inputs are never written: the forward only loads; the backward stores into
  ``dst`` only, which is the logits only when the caller donates them. A
  Triton store does NOT bump torch's version counter, which is why the
  harness compares the logits' VALUES after every call (docs/bugs.md #2);
* custom ops with fake implementations, so FakeTensorMode (the memory
  checks at real scale), the collective trace and torch.compile see them as
  ordinary torch ops.

Under ``TRITON_INTERPRET=1`` the same kernels run on CPU tensors (Triton's
interpreter, numpy), which is how CI checks them without a GPU; the tile is
then half the row (at least 16, at most 4096 columns) so even small
vocabularies cross a tile boundary and exercise the online rescale, and a
program covers 64 rows (the interpreter's cost is per program and per op).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..row_stats import LOG_ZERO_FLOOR
from .env import interpreting

_FLOOR = tl.constexpr(LOG_ZERO_FLOOR)


@triton.jit
def _rows_of(program, row_index_ptr, n_rows, HAS_ROW_INDEX: tl.constexpr, BLOCK_R: tl.constexpr):
    """The program's ``BLOCK_R`` evaluated rows: (position among the evaluated rows, logits row, in range)."""
    position = program * BLOCK_R + tl.arange(0, BLOCK_R)
    in_range = position < n_rows
    if HAS_ROW_INDEX:
        row = tl.load(row_index_ptr + position, mask=in_range, other=0).to(tl.int64)
    else:
        row = position.to(tl.int64)
    return position, row, in_range


@triton.jit
def _load_tile(row_ptr, start, in_range, n_cols, stride_col, temperature, SCALED: tl.constexpr, BLOCK_V: tl.constexpr):
    """The tile of columns ``[start, start + BLOCK_V)`` of the program's rows, in fp32 and ``/ temperature``.

    Returns (columns, mask, column offsets, values); masked entries read ``-inf`` (they add ``exp(-inf) = 0``).
    """
    cols = start + tl.arange(0, BLOCK_V)
    mask = in_range[:, None] & (cols < n_cols)[None, :]
    col_offsets = cols.to(tl.int64)[None, :]
    x = tl.load(row_ptr + col_offsets * stride_col, mask=mask, other=float("-inf")).to(tl.float32)
    if SCALED:
        x = x / temperature
    return cols, mask, col_offsets, x


@triton.jit
def _row_stats_kernel(
    logits_ptr,
    row_index_ptr,
    targets_ptr,
    max_ptr,
    stats_ptr,
    n_rows,
    n_cols,
    stride_row,
    stride_col,
    target_offset,
    temperature,
    HAS_ROW_INDEX: tl.constexpr,
    WITH_ENTROPY: tl.constexpr,
    SCALED: tl.constexpr,
    N_STATS: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    position, row, in_range = _rows_of(tl.program_id(0), row_index_ptr, n_rows, HAS_ROW_INDEX, BLOCK_R)
    base = logits_ptr + row[:, None] * stride_row
    run_max = tl.full([BLOCK_R], float("-inf"), tl.float32)
    acc_sum = tl.zeros([BLOCK_R, BLOCK_V], tl.float32)
    acc_ent = tl.zeros([BLOCK_R, BLOCK_V], tl.float32)
    for start in range(0, n_cols, BLOCK_V):
        cols, mask, _, x = _load_tile(base, start, in_range, n_cols, stride_col, temperature, SCALED, BLOCK_V)
        new_max = tl.maximum(run_max, tl.max(x, axis=1))
        anchor = tl.where(new_max == float("-inf"), 0.0, new_max)
        # <= 0; -inf (nothing finite seen yet) is clamped: its factor is 0 either way, and 0 * floor is 0.
        step = tl.maximum(run_max - anchor, _FLOOR)[:, None]
        factor = tl.exp(step)
        shifted = x - anchor[:, None]
        probs = tl.exp(shifted)
        if WITH_ENTROPY:
            acc_ent = factor * (acc_ent + step * acc_sum) + probs * tl.maximum(shifted, _FLOOR)
        acc_sum = acc_sum * factor + probs
        run_max = new_max
    anchor = tl.where(run_max == float("-inf"), 0.0, run_max)
    local_target = tl.load(targets_ptr + position, mask=in_range, other=0) - target_offset
    in_shard = in_range & (local_target >= 0) & (local_target < n_cols)
    target_col = tl.where(in_shard, local_target, 0)
    target = tl.load(logits_ptr + row * stride_row + target_col * stride_col, mask=in_shard, other=0.0)
    target = target.to(tl.float32)
    if SCALED:
        target = target / temperature
    out = stats_ptr + position * N_STATS
    tl.store(max_ptr + position, run_max, mask=in_range)
    tl.store(out, tl.sum(acc_sum, axis=1), mask=in_range)
    tl.store(out + 1, tl.where(in_shard, target - anchor, 0.0), mask=in_range)
    if WITH_ENTROPY:
        tl.store(out + 2, tl.sum(acc_ent, axis=1), mask=in_range)


@triton.jit
def _grad_kernel(
    src_ptr,
    dst_ptr,
    row_index_ptr,
    targets_ptr,
    shift_ptr,
    grad_log_probs_ptr,
    grad_entropy_ptr,
    entropy_ptr,
    n_rows,
    n_cols,
    src_stride_row,
    src_stride_col,
    dst_stride_row,
    dst_stride_col,
    target_offset,
    temperature,
    HAS_ROW_INDEX: tl.constexpr,
    ENTROPY_GRAD: tl.constexpr,
    SCALED: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    position, row, in_range = _rows_of(tl.program_id(0), row_index_ptr, n_rows, HAS_ROW_INDEX, BLOCK_R)
    src = src_ptr + row[:, None] * src_stride_row
    dst = dst_ptr + row[:, None] * dst_stride_row
    shift = tl.load(shift_ptr + position, mask=in_range, other=0.0)[:, None]
    grad_log_prob = tl.load(grad_log_probs_ptr + position, mask=in_range, other=0.0)[:, None]
    local_target = (tl.load(targets_ptr + position, mask=in_range, other=0) - target_offset)[:, None]
    grad_entropy = grad_log_prob
    offset = grad_log_prob
    if ENTROPY_GRAD:
        grad_entropy = tl.load(grad_entropy_ptr + position, mask=in_range, other=0.0)[:, None]
        entropy = tl.load(entropy_ptr + position, mask=in_range, other=0.0)[:, None]
        offset = grad_log_prob + grad_entropy * entropy
    for start in range(0, n_cols, BLOCK_V):
        cols, mask, col_offsets, x = _load_tile(
            src, start, in_range, n_cols, src_stride_col, temperature, SCALED, BLOCK_V
        )
        log_p = x - shift
        probs = tl.exp(log_p)
        # dL/dz = p * (-g_H * log p - (g_lp + g_H * H)) + g_lp * 1[v = t]   (docs/math.md)
        if ENTROPY_GRAD:
            grad = probs * (tl.maximum(log_p, _FLOOR) * -grad_entropy - offset)
        else:
            grad = probs * -grad_log_prob
        grad = tl.where(cols[None, :] == local_target, grad + grad_log_prob, grad)
        if SCALED:
            grad = grad / temperature
        tl.store(dst + col_offsets * dst_stride_col, grad.to(dst_ptr.dtype.element_ty), mask=mask)


# The launch choices, measured on an H200 with ``python -m bench.gpu_tune`` (docs/triton.md, "Launch choices"):
# the forward reduces every tile to its row's running max, so narrow tiles with 4 warps keep the most rows in
# flight; the backward has no reduction and streams best in wide tiles with one warp per 512 columns.
FORWARD_TILE = 2048
BACKWARD_TILE = 8192


def block_columns(n_cols: int, widest: int) -> int:
    """The column tile, at most ``widest``: a function of ``V_local`` and the interpreter only (chunk invariance).

    Only the forward's tile orders additions (its sums run lane by lane
    across tiles); the backward's is elementwise, so its width never changes
    a bit.
    """
    if interpreting():
        return min(max(triton.next_power_of_2(-(-n_cols // 2)), 16), 4096)
    return min(max(triton.next_power_of_2(n_cols), 16), widest)


def warps(block: int, forward: bool) -> int:
    """Warps per program for a ``block``-column tile (a launch option: it never changes a result's bits)."""
    return 4 if forward else max(4, block // 512)


def block_rows() -> int:
    """Rows per program: ONE on a GPU; 64 under the interpreter, whose cost is per program and per op.

    Either way each row is reduced along its own axis only (``tl.max`` /
    ``tl.sum`` over ``axis=1``), so its bits do not depend on which rows share
    its program (the interpreter reduces with numpy, row by row).
    """
    return 64 if interpreting() else 1


def _launch(kernel, rows: int, block: int, forward: bool, *args, **constexprs) -> None:
    per_program = block_rows()
    options = {} if interpreting() else {"num_warps": warps(block, forward)}
    kernel[(triton.cdiv(rows, per_program),)](*args, BLOCK_R=per_program, BLOCK_V=block, **constexprs, **options)


@torch.library.custom_op("lph_triton::row_stats", mutates_args=())
def row_stats(
    logits: torch.Tensor,
    row_index: torch.Tensor | None,
    targets: torch.Tensor,
    target_offset: int,
    temperature: float,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per evaluated row: (rank-local max, ``[sum exp, target shift, sum exp * shift]``), one read of the row.

    Row ``i`` is ``logits[row_index[i]]``, or ``logits[i]`` without ``row_index``.
    """
    rows = targets.shape[0]
    local_max = torch.empty(rows, dtype=torch.float32, device=logits.device)
    stats = torch.empty(rows, 3 if with_entropy else 2, dtype=torch.float32, device=logits.device)
    if rows:
        block = block_columns(logits.shape[1], FORWARD_TILE)
        _launch(
            _row_stats_kernel,
            rows,
            block,
            True,
            logits,
            targets if row_index is None else row_index,
            targets,
            local_max,
            stats,
            rows,
            logits.shape[1],
            logits.stride(0),
            logits.stride(1),
            target_offset,
            temperature,
            HAS_ROW_INDEX=row_index is not None,
            WITH_ENTROPY=with_entropy,
            SCALED=temperature != 1.0,
            N_STATS=stats.shape[1],
        )
    return local_max, stats


@row_stats.register_fake
def _row_stats_fake(logits, row_index, targets, target_offset, temperature, with_entropy):
    rows = targets.shape[0]
    return (
        logits.new_empty(rows, dtype=torch.float32),
        logits.new_empty(rows, 3 if with_entropy else 2, dtype=torch.float32),
    )


@torch.library.custom_op("lph_triton::write_grad", mutates_args=("dst",))
def write_grad(
    dst: torch.Tensor,
    src: torch.Tensor | None,
    row_index: torch.Tensor | None,
    targets: torch.Tensor,
    shift: torch.Tensor,
    grad_log_probs: torch.Tensor,
    grad_entropy: torch.Tensor | None,
    entropy: torch.Tensor | None,
    target_offset: int,
    temperature: float,
) -> None:
    """Write ``dL/dz`` of the evaluated rows into ``dst`` (in its dtype), reading ``src`` (``dst`` itself if None).

    ``src is None`` is donation: the kernel reads each tile of the logits
    before it overwrites that same tile, so one buffer serves both.
    """
    rows = targets.shape[0]
    if not rows:
        return
    src = dst if src is None else src
    block = block_columns(src.shape[1], BACKWARD_TILE)
    entropy_grad = grad_entropy is not None
    _launch(
        _grad_kernel,
        rows,
        block,
        False,
        src,
        dst,
        targets if row_index is None else row_index,
        targets,
        shift,
        grad_log_probs,
        grad_entropy if entropy_grad else grad_log_probs,
        entropy if entropy_grad else grad_log_probs,
        rows,
        src.shape[1],
        src.stride(0),
        src.stride(1),
        dst.stride(0),
        dst.stride(1),
        target_offset,
        temperature,
        HAS_ROW_INDEX=row_index is not None,
        ENTROPY_GRAD=entropy_grad,
        SCALED=temperature != 1.0,
    )


@write_grad.register_fake
def _write_grad_fake(
    dst, src, row_index, targets, shift, grad_log_probs, grad_entropy, entropy, target_offset, temperature
):
    return None
