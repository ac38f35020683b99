"""Stand-in with NeMo-RL's fused LM head ``ChunkedDistributedHiddenStatesToLogprobs``: its signature, plain arithmetic.

Written from the upstream SIGNATURE (sequence-first hidden states ``[S, B, H]``,
targets ``[B, S]``, this rank's head shard ``[V_local, H]`` and its vocabulary
range, an integer chunk size over the sequence, the TP group); no upstream
code is copied. One rank, autograd through plain torch per chunk (no one_hot).
The other Functions are the correct stand-in's (executed from its file).
"""

from pathlib import Path

import torch

_FIXED = Path(__file__).resolve().parents[3] / "fixed" / "nemo_rl" / "distributed" / "model_utils.py"
exec(compile(_FIXED.read_text(), str(_FIXED), "exec"))  # noqa: S102 - the log-prob Functions


class ChunkedDistributedHiddenStatesToLogprobs:
    @staticmethod
    def apply(hidden, target, weight, vocab_start_index, vocab_end_index, chunk_size, tp_group, inference_only=False):
        local, outside = _local_targets(target, vocab_start_index, vocab_end_index)  # noqa: F821 - from the exec
        pieces = []
        for s in range(0, hidden.shape[0], chunk_size):
            logits = (hidden[s : s + chunk_size] @ weight.T).float().transpose(0, 1)
            picked = logits.log_softmax(-1).gather(-1, local[:, s : s + chunk_size].unsqueeze(-1)).squeeze(-1)
            pieces.append(picked.masked_fill(outside[:, s : s + chunk_size], 0.0))
        return torch.cat(pieces, dim=1)
