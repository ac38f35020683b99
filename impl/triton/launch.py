"""The Triton backend of ``impl.token_level.FusedLogProbEntropy``: the launches around the kernels.

The Function (shared with the torch backend) validates, agrees over the TP
group, adds the statistics in rank order, builds the outputs and applies the
entropy gate; this module only replaces the passes over ``[rows, V_local]``:

* forward: ONE read of each evaluated row (``lph_triton::row_stats``), the
  statistics relative to the rank-local max, then the MAX all-reduce of the
  row maxima and the rescale to the global max (``impl.row_stats``). With the
  Function's rank-ordered all-gather that is the same two collectives, in
  the same order, as the torch backend: data-independent (docs/bugs.md #5);
* backward: ONE read and ONE write of each evaluated row
  (``lph_triton::write_grad``) into the gradient buffer of
  ``impl.row_stats.gradient_buffer``: a fresh one, or the logits themselves
  when donating (the only case in which the logits are written, docs/bugs.md #2).

``chunk_size`` does not reach the kernels: it bounds the torch backend's
fp32 ``[chunk, V_local]`` workspace, and the kernels keep none (their tiles
live in registers), so each pass is ONE launch over every evaluated row and
the results cannot depend on the chunking. What chunk invariance asks of a
kernel, that a row's bits never depend on the rows launched with it, is
what response-only evaluation exercises (other rows, other positions) and
what ``tests/test_triton_kernels.py`` checks directly.
"""

from __future__ import annotations

from ..row_stats import all_reduce_max, gradient_buffer, rescale_to_global_max
from .kernels import row_stats, write_grad


def forward_stats(logits, row_index, targets, tp_group, tp_rank, in_shard, with_entropy, temperature):
    """(global row max, this rank's statistics shifted by it), like the torch backend's; one launch, one read."""
    targets = targets.contiguous()
    row_index = None if row_index is None else row_index.contiguous()
    local_max, stats = row_stats(logits, row_index, targets, tp_rank * logits.shape[1], temperature, with_entropy)
    global_max = local_max.clone()
    all_reduce_max(global_max, tp_group)
    rescale_to_global_max(stats, local_max, global_max, in_shard)
    return global_max, stats


def backward(logits, row_index, targets, shift, grads, tp_rank, temperature, donate):
    """The logits' gradient (in their dtype): one launch, one read and one write of every evaluated row."""
    grad_log_probs, grad_entropy, entropy = grads
    grad_log_probs = grad_log_probs.contiguous()
    entropy_term = entropy is not None  # an entropy gradient arrived: the gate is on and the loss uses the entropy
    if entropy_term:
        grad_entropy = grad_entropy.contiguous()
    else:
        grad_entropy = entropy = None
    targets = targets.contiguous()
    row_index = None if row_index is None else row_index.contiguous()
    grad_logits = gradient_buffer(logits, row_index, donate)
    source = None if donate else logits
    offset = tp_rank * logits.shape[1]
    write_grad(
        grad_logits, source, row_index, targets, shift, grad_log_probs, grad_entropy, entropy, offset, temperature
    )
    return grad_logits
