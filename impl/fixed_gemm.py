"""The hidden-state path's matmuls, each at ONE shape: a row's bits follow neither its neighbours nor the TP degree.

A BLAS chooses its kernel, and with it the order in which an output
element's products are added, from the call's shape: on this CPU's MKL
``h[i:i+1] @ W.T`` differs in the last bit from row ``i`` of ``h @ W.T``,
an fp32 GEMM with few output rows rounds a row by how many others share
the call, and a different TP degree hands the GEMM a different number of
vocabulary rows. Measured (fp32, bf16, fp16; contractions 1..97 and 256,
both operand layouts): a GEMM whose OUTPUT COLUMNS are the 256 rows of a
block gives each column the same bits at every position in the block,
whatever its neighbours, for any number of output rows and any
contraction. So every matmul here is written with the block's rows as its
output columns, one leaf block of the vocabulary at a time:

* rows: ``MATMUL_BLOCK_ROWS`` rows aligned to absolute row indices, the
  last block of a call zero-padded to full size (a copy of at most one
  ``[256, H]`` block): a row's logits are the same bits in any batch,
  chunk or position;
* vocabulary: one leaf block of the global summation tree
  (``impl.row_stats.leaf_blocks``) per GEMM, whose width ``V / G`` (and
  position inside the shard's leaves) is the same at every power-of-two TP
  degree dividing ``G``: ``z.T = W_leaf @ h.T``;
* the contraction over the vocabulary (``grad_hidden.T = W_leaf.T @ g.T``)
  is summed leaf by leaf by the same adjacent-pair tree as the softmax
  statistics (``push_leaf``: at most ``log2(leaves) + 1``
  partials live), the TP ranks' parts then added as the tree's top
  (``sum_in_rank_order``);
* ``grad_weight``'s contraction is over the call's rows; each leaf's
  ``[width, H]`` output is again TP-independent.

The cost is the same arithmetic in more, smaller GEMM calls (a leaf is
``V / G`` columns, 2,374 at Qwen's 151,936) and one padded block per call
(docs/topology.md).
"""

from __future__ import annotations

import torch

# Rows per matmul call: large enough for an efficient GEMM on a CPU (the weight is re-read once per block),
# small enough that chunk sizes stay fine-grained and the padded last block stays cheap.
MATMUL_BLOCK_ROWS = 256
# A leaf at least this wide takes MKL's blocked kernels, where a GEMM over several leaves gives each leaf's rows
# the bits of the leaf's own GEMM (``FixedShapeGemm.logits``); narrower leaves run one GEMM each.
WIDE_LEAF = 256
# Every GEMM operand starts on this byte boundary: MKL's small fp32 kernels round by the operands' alignment (the
# same leaf at a 168-byte offset, i.e. 8 mod 16, gave other bits than at 0). A misaligned operand (a head shard
# that is a view into a larger tensor, a row block of an odd H) is copied to a private aligned buffer first;
# production shards and hidden sizes are aligned already (no copy).
ALIGNMENT = 64


def _aligned(tensor: torch.Tensor) -> bool:
    return tensor.data_ptr() % ALIGNMENT == 0


class FixedShapeGemm:
    """The matmuls of one call: ``hidden [rows, H]`` against this rank's head shard ``weight [V_local, H]``.

    ``leaves`` is ``leaf_blocks(V_local, tp)``: how many leaf blocks of the
    global vocabulary the shard holds. Buffers are private and reused; the
    inputs are only read.
    """

    def __init__(self, hidden: torch.Tensor, weight: torch.Tensor, leaves: int):
        self.hidden, self.weight = hidden, weight
        self.width = weight.shape[0] // leaves
        self.columns = [slice(leaf * self.width, (leaf + 1) * self.width) for leaf in range(leaves)]
        self._buffers: dict[str, torch.Tensor] = {}

    def _buffer(self, name: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """A private buffer (fresh allocations are aligned), zero-filled when made, kept while its shape holds."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape != shape:
            buffer = self._buffers[name] = torch.zeros(shape, dtype=dtype, device=self.hidden.device)
        return buffer

    def _aligned_copy(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` itself when it starts on an ``ALIGNMENT`` boundary, else its copy in a private buffer."""
        if _aligned(tensor):
            return tensor
        return self._buffer(name, tuple(tensor.shape), tensor.dtype).copy_(tensor)

    def _head(self, cols: slice | None = None) -> torch.Tensor:
        """The head shard (or one leaf of it), aligned."""
        if cols is None:
            return self._aligned_copy("shard", self.weight)
        return self._aligned_copy("leaf", self.weight[cols])

    def _rows(self, start: int, end: int) -> torch.Tensor:
        """``hidden[start:end]`` as a full, aligned ``[MATMUL_BLOCK_ROWS, H]`` block (the last one zero-padded)."""
        if end - start == MATMUL_BLOCK_ROWS and _aligned(self.hidden[start:end]):
            return self.hidden[start:end]
        block = self._buffer("padded", (MATMUL_BLOCK_ROWS, self.hidden.shape[1]), self.hidden.dtype)
        block[: end - start].copy_(self.hidden[start:end])
        block[end - start :].zero_()
        return block

    def _grad_tile(self, grad_z: torch.Tensor, cols: slice) -> torch.Tensor:
        """``grad_z[:, cols].T`` in a contiguous fp32 ``[width, MATMUL_BLOCK_ROWS]`` tile, zero-padded."""
        tile = self._buffer("tile", (self.width, MATMUL_BLOCK_ROWS), torch.float32)
        rows = grad_z.shape[0]
        tile[:, :rows].copy_(grad_z[:, cols].t())
        if rows < MATMUL_BLOCK_ROWS:
            tile[:, rows:].zero_()
        return tile

    def logits(self, start: int, end: int, out: torch.Tensor) -> torch.Tensor:
        """``out`` (fp32 ``[end-start, V_local]``) := ``hidden[start:end] @ weight.T``, leaf by leaf.

        Wide leaves (``WIDE_LEAF`` columns or more) in one GEMM over the whole
        shard: there each output row was measured to be the same bits as in
        its leaf's own GEMM (fp32 and bf16, H 1 to 1,024, leaves of 128 to
        2,374 columns, shards of 1 to 8 leaves), and the real scales then pay
        one launch per block instead of ``leaves``.
        """
        rows_t = self._rows(start, end).t()
        if self.width >= WIDE_LEAF:
            out.copy_(torch.mm(self._head(), rows_t)[:, : end - start].t())
            return out
        for cols in self.columns:
            out[:, cols].copy_(torch.mm(self._head(cols), rows_t)[:, : end - start].t())
        return out

    def backward_block(self, grad_z: torch.Tensor, start: int, end: int, grad_hidden, grad_weight) -> None:
        """One row block's two contractions of ``grad_z`` (fp32 ``[end-start, V_local]``), leaf by leaf.

        ``grad_hidden`` (fp32 ``[n, H]`` or None) := ``grad_z @ weight`` over
        this shard, the leaves' parts summed by their tree; ``grad_weight``
        (the fp32 ``[V_local, H]`` accumulator, or None) += ``grad_z.T @
        hidden[start:end]``, in row-block order. ``grad_z`` is rounded to the
        weight's dtype for ``grad_hidden``'s matmul, as the trainer's LM-head
        backward does; ``grad_weight``'s runs in fp32.
        """
        if grad_hidden is not None:
            parts: list = []
            for cols in self.columns:
                tile = self._grad_tile(grad_z, cols)
                operand = tile if self.weight.dtype == torch.float32 else tile.to(self.weight.dtype)
                push_leaf(parts, torch.mm(self._head(cols).t(), operand).float())
            grad_hidden.copy_(tree_root(parts)[:, : end - start].t())
            del parts  # the partials go before grad_weight's fp32 rows come (the memory bound's hidden term)
        if grad_weight is not None:
            rows = self.hidden[start:end]
            rows = rows.float() if rows.dtype != torch.float32 else self._aligned_copy("rows", rows)
            for cols in self.columns:
                tile = self._grad_tile(grad_z, cols)
                # Into a fresh (aligned) output, then added: MKL's in-place ``addmm_`` rounds by where the
                # accumulator's rows sit in memory (leaf 1 of a shard at TP 1 vs leaf 0 at TP 2 gave other bits).
                grad_weight[cols].add_(torch.mm(tile[:, : end - start], rows))


def push_leaf(stack: list, part: torch.Tensor) -> None:
    """Add one leaf's owned buffer to a streamed adjacent-pair tree ``(p0 + p1) + (p2 + p3)``.

    ``stack`` holds ``(level, partial)`` subtrees; a new part is merged with
    the last subtree while both are of the same level (a binary counter), so
    at most ``log2(leaves) + 1`` partials (``[H, 256]`` fp32) are alive. For a
    power-of-two number of leaves the additions are those of
    ``impl.row_stats.pairwise_sum``: the leaves' tree is a subtree of the
    TP ranks' one, whatever the degree.
    """
    level = 0
    while stack and stack[-1][0] == level:
        part = stack.pop()[1].add_(part)
        level += 1
    stack.append((level, part))


def tree_root(stack: list) -> torch.Tensor:
    """The sum of a complete streamed tree (``push_leaf``): a power-of-two number of leaves."""
    if len(stack) != 1:
        levels = [level for level, _ in stack]
        raise ValueError(f"tree_root: needs a power-of-two number of leaves (partial trees of levels {levels})")
    return stack[0][1]
