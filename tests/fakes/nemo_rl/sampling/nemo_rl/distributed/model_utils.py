"""Stand-in for NeMo-RL's ``DistributedLogprobWithSampling`` / ``ChunkedDistributedLogprobWithSampling``.

Written for the sampling adapter's seam tests from the upstream SIGNATURES
(``[B, S, V_local]`` logits, ``[B, S]`` targets, the TP group, ``top_k`` with
None or <= 0 for off, ``top_p`` with 1.0 for off); no upstream code is copied.
Plain arithmetic: the row is gathered whole (differentiably), top-k then top-p
keep every tied copy of the boundary value, and the masked ``log_softmax`` is
gathered at the target (``-inf`` for a target outside the kept set).
The token-level Functions every revision has are the correct stand-in's (executed from its file).
"""

from pathlib import Path

import torch
import torch.distributed
import torch.distributed.nn.functional as dist_nn

_FIXED = Path(__file__).resolve().parents[3] / "fixed" / "nemo_rl" / "distributed" / "model_utils.py"
exec(compile(_FIXED.read_text(), str(_FIXED), "exec"))  # noqa: S102 - DistributedLogprob and the others


def _whole_rows(logits, group):
    return torch.cat(dist_nn.all_gather(logits.float().contiguous(), group=group), dim=-1)


def _kept(z, top_k, top_p):
    kept = torch.ones_like(z, dtype=torch.bool)
    if top_k is not None and 0 < top_k < z.shape[-1]:
        kth = z.topk(top_k, dim=-1).values[..., -1:]
        kept &= z >= kth
    if top_p is not None and top_p < 1.0:
        masked = z.masked_fill(~kept, float("-inf"))
        probs = masked.softmax(dim=-1)
        above = (probs.unsqueeze(-1) * (masked.unsqueeze(-1) > masked.unsqueeze(-2))).sum(dim=-2)
        kept &= above < top_p
    return kept


def _log_probs(logits, target, tp_group, top_k, top_p):
    with torch.no_grad():
        kept = _kept(_whole_rows(logits.detach(), tp_group), top_k, top_p)
    z = _whole_rows(logits, tp_group).masked_fill(~kept, float("-inf"))
    log_probs = z.log_softmax(dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    # every rank computed every row, and the all-gather's backward adds the ranks' gradients: 1/tp each
    size = torch.distributed.get_world_size(tp_group)
    return log_probs.detach() + (log_probs - log_probs.detach()) / size


class DistributedLogprobWithSampling:
    @staticmethod
    def apply(vocab_parallel_logits, target, tp_group, top_k, top_p, inference_only=False):
        return _log_probs(vocab_parallel_logits, target, tp_group, top_k, top_p)


class ChunkedDistributedLogprobWithSampling:
    @staticmethod
    def apply(vocab_parallel_logits, target, tp_group, top_k, top_p, chunk_size, inference_only=False):
        size = torch.distributed.get_world_size(tp_group)
        if chunk_size % size:
            raise ValueError(f"chunk_size {chunk_size} must be divisible by the tensor parallel size {size}")
        chunks = [
            _log_probs(
                vocab_parallel_logits[:, s : s + chunk_size], target[:, s : s + chunk_size], tp_group, top_k, top_p
            )
            for s in range(0, vocab_parallel_logits.shape[1], chunk_size)
        ]
        return torch.cat(chunks, dim=1)
