"""Stand-in carrying docs/bugs.md #3 as NeMo-RL HEAD has it: a one_hot over ``V_local`` in the chunked backward.

Everything else is the correct stand-in beside it (executed from its file);
only ``ChunkedDistributedLogprob``'s per-chunk gradient builds
``one_hot(masked_target, num_classes=V_local)`` (int64) to place the chosen
token's ``+g``: correct values, ``[rows, V_local]`` int64 memory (NeMo-RL #4114).
"""

from pathlib import Path

import torch

_FIXED = Path(__file__).resolve().parents[3] / "fixed" / "nemo_rl" / "distributed" / "model_utils.py"
exec(compile(_FIXED.read_text(), str(_FIXED), "exec"))  # noqa: S102 - the correct stand-in, then the bug on top


def _one_hot_chunk_grad(logits, local, outside, grad_output, group):
    p = _log_softmax(logits.float(), group).exp()  # noqa: F821 - defined by the exec above
    is_chosen = (~outside).unsqueeze(-1) * torch.nn.functional.one_hot(local, num_classes=logits.shape[-1])
    return is_chosen.float().sub_(p).mul_(grad_output.unsqueeze(-1))


ChunkedDistributedLogprob.chunk_grad = staticmethod(_one_hot_chunk_grad)  # noqa: F821
