"""What every backend of the token-level Function and the hidden-state path share: the per-row statistics.

Both backends of ``impl.token_level`` (the torch chunk loop and the Triton
kernels of ``impl.triton.launch``) and the hidden-state path
(``impl.hidden_states``) reduce a row of logits to the same statistics:
``sum exp(z - m)``, the target's ``z_t - m`` and ``sum exp(z - m)(z - m)``
(entropy), shifted by the GLOBAL row max ``m``. What they have in common
lives here once, so the paths cannot drift apart:

* the TP combination, the contract of docs/bugs.md #5: one MAX all-reduce
  of the row maxima, then one all-gather of the stacked statistics added in
  rank order; both issued by every rank whatever the data;
* which targets fall on this rank's shard (``shard_targets``);
* the row sums that build the statistics (``row_sum``: a fixed tree of
  elementwise adds over the GLOBAL column index, whose subtrees are the TP
  shards, so neither chunking nor the TP degree changes a bit; see
  ``leaf_blocks`` and docs/topology.md) and the statistics of a block of
  shifted rows (``exp_sums``);
* the outputs from the summed statistics (``finish``, ``entropy_from``) and
  the backward's ``dL/dz`` (``backward_terms``, ``grad_of_log_p``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# exp(x) is exactly 0 in fp32 for x below about -103.97. Shifted logits are
# clamped to this floor only AFTER their exponential is taken, so the clamp
# changes no probability; it only keeps ``p * log p`` at 0 * finite = 0
# instead of 0 * -inf = NaN for masked (-inf) vocabulary entries.
LOG_ZERO_FLOOR = -200.0


def tp_world(group) -> tuple[int, int]:
    """Return (size, rank) of the TP group; no group (or no process group) is one rank."""
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1, 0
    return dist.get_world_size(group), dist.get_rank(group)


def chunk_bounds(rows: int, chunk_size: int | None) -> list[tuple[int, int]]:
    """Row ranges of the chunk loop; ``None`` or ``chunk_size >= rows`` is one chunk.

    Routing ``chunk_size >= rows`` to a single chunk is the SkyRL #1650 fix:
    chunking a single chunk costs more memory than not chunking at all.
    """
    if chunk_size is None or chunk_size >= rows:
        return [(0, rows)]
    return [(start, min(start + chunk_size, rows)) for start in range(0, rows, chunk_size)]


def shard_targets(targets: torch.Tensor, tp_rank: int, v_local: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which GLOBAL target ids fall on this rank's shard ``[tp_rank*v_local, (tp_rank+1)*v_local)``, and where.

    Returns ``(in_shard [rows] bool, index [rows, 1])``: ``index`` is the
    target's column in the shard, clamped into it for the rows whose target
    another rank holds (a valid column to ``gather``/``add_at_target``, whose
    value the caller masks with ``in_shard``).
    """
    local_targets = targets - tp_rank * v_local
    in_shard = (local_targets >= 0) & (local_targets < v_local)
    return in_shard, local_targets.clamp(0, v_local - 1).unsqueeze(1)


def all_reduce_max(tensor: torch.Tensor, group) -> None:
    """MAX is exact, so the collective's internal order cannot change a bit."""
    if tp_world(group)[0] > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=group)


def sum_in_rank_order(tensor: torch.Tensor, group) -> torch.Tensor:
    """Sum over the TP group: the ranks' parts added as the top of the row sums' tree (``pairwise_sum``).

    A ring all-reduce adds an element's parts in an order that depends on
    the element's POSITION in the buffer, so the same row would round
    differently in a batch of another composition (e.g. response-only vs the
    full stream). Gathering the small ``[rows, k]`` statistics and adding
    them in a fixed order makes every row's result independent of its
    neighbours, and identical on every rank. The order is the adjacent-pair
    tree over rank order, ``(r0 + r1) + (r2 + r3)``: with a power-of-two TP
    degree each rank's part is a subtree of the tree over the whole
    vocabulary (``leaf_blocks``), so the sum is the same bits at every such
    degree (docs/topology.md).
    """
    size, _ = tp_world(group)
    if size == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return pairwise_sum(parts)


def pairwise_sum(parts: list) -> torch.Tensor:
    """``(p0 + p1) + (p2 + p3) ...`` of owned buffers (written in place): adjacent pairs first, an odd one carried.

    The order is fixed by ``len(parts)`` alone; no allocation.
    """
    while len(parts) > 1:
        paired = [parts[index].add_(parts[index + 1]) for index in range(0, len(parts) - 1, 2)]
        parts = paired + parts[2 * len(paired) :]
    return parts[0]


def gradient_buffer(logits: torch.Tensor, row_index: torch.Tensor | None, donate: bool) -> torch.Tensor:
    """Where the backward writes the gradient; rows that were not evaluated read exactly 0.

    With donation it is the logits' own storage: each chunk is copied to its
    private fp32 buffer BEFORE its rows are overwritten, and rows never read
    are zeroed first. The write bumps the logits' version counter, so any
    other node that saved the logits and runs its backward later fails with
    torch's version-counter error instead of reading the gradient as logits.
    """
    if not donate:
        return torch.empty_like(logits) if row_index is None else torch.zeros_like(logits)
    buffer = logits.detach()
    if row_index is not None:
        unselected = torch.ones(logits.shape[0], dtype=torch.bool, device=logits.device)
        unselected[row_index] = False
        buffer.masked_fill_(unselected.unsqueeze(1), 0)
    return buffer


def rescale_to_global_max(stats, local_max, global_max, in_shard) -> None:
    """Statistics shifted by the rank-local row max -> shifted by the global row max, in place.

    With ``d = m_local - m_global <= 0``: ``sum exp(z - m_g) = e^d S0``,
    ``sum exp(z - m_g)(z - m_g) = e^d (S2 + d S0)`` and the target's
    ``z_t - m_g = (z_t - m_l) + d`` on the rank that owns it (0 elsewhere).
    A rank whose whole shard of a row is ``-inf`` (masked vocabulary) has
    ``m_l = -inf``, ``S0 = S2 = 0``: ``d`` is clamped to the log-zero floor in
    the sums (``e^d`` is already exactly 0 below it, so no finite case changes
    a bit) so that its contribution is 0, never ``0 * -inf = NaN``.
    """
    delta = local_max - global_max
    clamped = delta.clamp(min=LOG_ZERO_FLOOR)
    factor = clamped.exp()
    if stats.shape[1] == 3:
        stats[:, 2] = factor * (stats[:, 2] + clamped * stats[:, 0])
    stats[:, 0] = stats[:, 0] * factor
    stats[:, 1] = torch.where(in_shard, stats[:, 1] + delta, 0.0)


def exp_sums(stats: torch.Tensor, shifted: torch.Tensor, spare: torch.Tensor, with_entropy: bool, blocks: int) -> None:
    """``stats[:, 0] = sum exp(s)`` and, with entropy, ``stats[:, 2] = sum exp(s) s`` of the shifted rows ``s``.

    ``shifted`` (``z - m`` in a private fp32 buffer) is destroyed; ``spare``
    (a second private buffer of its shape) holds ``exp(s)`` when the entropy
    still needs ``s``, else the exponential is taken in place (one buffer
    fewer to stream). ``s`` is clamped to the log-zero floor only after its
    exponential is taken: ``0 log 0 = 0`` for ``-inf`` entries, never NaN.
    ``blocks`` is ``leaf_blocks`` of the shard: the row sums' tree.
    """
    probs = torch.exp(shifted, out=spare) if with_entropy else shifted.exp_()
    if with_entropy:
        # p * log p into the shifted buffer first: the row sums below consume their buffers.
        stats[:, 2] = row_sum(shifted.clamp_(min=LOG_ZERO_FLOOR).mul_(probs), blocks)
    stats[:, 0] = row_sum(probs, blocks)


def finish(stats: torch.Tensor, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_probs, entropy)`` from the TP-summed statistics ``[sum exp, target shift, sum exp * shift]``."""
    log_sum_exp = stats[:, 0].log()
    log_probs = stats[:, 1] - log_sum_exp
    return log_probs, entropy_from(stats, log_sum_exp) if with_entropy else None


def entropy_from(stats: torch.Tensor, log_sum_exp: torch.Tensor) -> torch.Tensor:
    """``H = lse - sum p (z - m)``: the forward's value and the backward's ``H`` from one formula."""
    return log_sum_exp - stats[:, 2] / stats[:, 0]


def backward_terms(stats: torch.Tensor, row_max: torch.Tensor, grad_log_probs, grad_entropy) -> tuple:
    """What the backward needs from the forward's row statistics and the incoming gradients.

    Returns ``(shift, g_lp, g_H, H)``: ``log p = z - shift`` with ``shift =
    m + lse``; ``g_lp`` in fp32 (zeros when no log-prob gradient arrived);
    ``g_H`` and the entropy ``H`` (the forward's formula, ``entropy_from``)
    only when an entropy gradient arrived for a call that computed it, else
    ``H`` is None and the entropy term is left out.
    """
    log_sum_exp = stats[:, 0].log()
    shift = row_max + log_sum_exp
    if grad_log_probs is None:
        grad_log_probs = torch.zeros(stats.shape[0], dtype=torch.float32, device=stats.device)
    grad_log_probs = grad_log_probs.float()
    entropy = None
    if grad_entropy is not None and stats.shape[1] == 3:
        entropy = entropy_from(stats, log_sum_exp)
        grad_entropy = grad_entropy.float()
    return shift, grad_log_probs, grad_entropy, entropy


def add_at_target(grad: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> None:
    """``grad[r, index[r]] += values[r]`` (``index``, ``values``: ``[rows, 1]``) with plain loads and stores.

    Not ``scatter_add_``: on CUDA it adds with floating-point atomics, which
    flush a subnormal to zero, so the exact ``0.0`` a rank adds for a target
    it does not hold (``shard_targets``' clamped column) turned a subnormal
    gradient into 0 at TP 4 but not at TP 1 (measured on an H100: -1.4e-45
    vs 0.0, docs/topology.md). Gather, add, scatter: one IEEE add per row,
    ``x + 0 = x`` for every ``x``. No one_hot, no ``[rows, V]`` integer
    tensor (docs/bugs.md #3).
    """
    grad.scatter_(1, index, grad.gather(1, index).add_(values))


def grad_of_log_p(log_p: torch.Tensor, spare: torch.Tensor, g_lp, g_h, entropy) -> torch.Tensor:
    """``dL/dz`` of a block of rows but the target's term, from ``log p`` in a private fp32 buffer (destroyed).

    ``dL/dz = g_lp * (1[v=t] - p) - g_H * p * (log p + H)
    = p * (-g_H * log p - (g_lp + g_H * H)) + g_lp * 1[v=t]``; this returns
    the first term (in ``log_p`` or ``spare``); the caller adds ``g_lp`` at the
    target column with ``add_at_target`` (no one_hot, no ``[rows, V]`` integer
    tensor: docs/bugs.md #3) and divides by the temperature. ``g_lp``,
    ``g_h``, ``entropy`` are the block's ``[rows]`` slices; ``entropy`` None
    leaves the entropy term out (``g_h`` unused). Without it ``log p`` is not
    needed again, so ``p`` is taken in place (one buffer, one pass fewer).
    """
    if entropy is None:
        probs = log_p.exp_()
        neg_coef = g_lp.neg().unsqueeze(1)
    else:
        probs = torch.exp(log_p, out=spare)
        offset = (g_lp + g_h * entropy).unsqueeze(1)
        neg_coef = log_p.clamp_(min=LOG_ZERO_FLOOR).mul_(g_h.neg().unsqueeze(1)).sub_(offset)
    return probs.mul_(neg_coef)


def _fold(rows: torch.Tensor) -> int:
    """Fold the last dimension of ``rows`` onto its lower half until one column is left; returns 1 (or 0 if empty).

    ``x[..., :h] += x[..., n-h:n]`` with ``h = n // 2``: pairwise summation
    made of elementwise adds only, in place, the order fixed by the width.
    """
    width = rows.shape[-1]
    while width > 1:
        half = width // 2
        rows[..., :half].add_(rows[..., width - half : width])
        width -= half
    return width


def row_sum_fixed_order(rows: torch.Tensor) -> torch.Tensor:
    """Sum each row of the 2-D ``rows`` (destroying it) in an order fixed by the column count alone.

    Folds the upper part of each row onto the lower part (``_fold``) until
    one column is left: the result of a row is bit-identical whether it is
    summed alone or among any number of others, on any device. In place on
    a private buffer: no allocation but the ``[rows]`` result. Costs
    ``log2(V)`` launches.
    """
    return rows[:, 0].clone() if _fold(rows) == 1 else rows.new_zeros(rows.shape[0])


# The finest vocabulary split whose results are the same bits as one rank's: the row sums' tree has at most
# this many leaf blocks (a power of two), so every power-of-two TP degree up to it that divides V is covered.
MAX_LEAF_BLOCKS = 64


def leaf_blocks(v_local: int, tp: int) -> int:
    """How many leaf blocks of the global summation tree one shard row holds (1: the shard is one block).

    The tree over a row of the GLOBAL vocabulary ``V = v_local * tp``: ``G``
    equal contiguous leaf blocks, ``G`` the largest power of two up to
    ``MAX_LEAF_BLOCKS`` dividing ``V``; each block is summed by
    ``row_sum_fixed_order`` (fixed by the block's width), then the blocks by
    ``pairwise_sum`` over the block index. At a TP degree ``tp`` dividing
    ``G`` a shard is ``G / tp`` whole leaf blocks, i.e. a subtree, and the
    rank combination (``sum_in_rank_order``) is the tree's top: the same
    additions in the same order at every such degree. At a degree that does
    not divide ``G`` (not a power of two, or above ``G``) the shard is one
    block: deterministic, but not the same bits as at other degrees.
    """
    vocab, leaves = v_local * tp, 1
    while leaves < MAX_LEAF_BLOCKS and vocab > 0 and vocab % (2 * leaves) == 0:
        leaves *= 2
    return leaves // tp if leaves % tp == 0 else 1


def row_sum(rows: torch.Tensor, blocks: int = 1) -> torch.Tensor:
    """Row sums of a private contiguous workspace buffer (destroyed), by the global tree of ``leaf_blocks``.

    Only elementwise adds, each fixed by the column index alone: a row's sum
    does not depend on how many rows share the call (chunking, packing,
    response-only selection), on the device, on the thread count, nor (for
    ``blocks`` from ``leaf_blocks``) on the TP degree. ``torch.sum`` on the CPU
    is row-count invariant for most shapes but splits one long reduction
    across threads, so it is not used.
    """
    count, width = rows.shape
    if blocks == 1 or count == 0:
        return row_sum_fixed_order(rows)
    leaves = rows.view(count, blocks, width // blocks)
    _fold(leaves)
    sums = leaves[:, :, 0]
    while sums.shape[1] > 1:  # ``blocks`` is a power of two: adjacent pairs, in place
        sums = sums[:, 0::2].add_(sums[:, 1::2])
    return sums[:, 0].clone()
