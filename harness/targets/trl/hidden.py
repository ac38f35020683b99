"""TRL's chunked LM-head log-prob Function (``trl/kernels/chunked_logprob.py``) through the hidden-state entry point.

``ChunkedLogProbFunction.apply(hidden [N, H], weight [V, H], bias, targets,
temperature, chunk_size, softcap, logit_scale, outputs)`` is what TRL's fused
forward (``trl/trainer/utils.py``, ``fused_lm_head=True``) calls, with
``chunk_size = _CHUNKED_LOGPROB_CHUNK_SIZE`` (a vocabulary width: the Function
projects ``[4096 tokens, chunk_size vocabulary]`` tiles and folds them into an
online logsumexp) and ``outputs`` naming the extra per-token results wanted
(``"entropy"`` when the trainer logs or regularises it). The adapter calls it
the same way: no bias, no softcap, ``logit_scale = 1``, TRL's chunk default
read from its file, ``outputs = ("entropy",)`` when entropy is asked for.
The entropy comes back with its gradient (the Function's backward folds
``d entropy / dz`` in), so ``entropy`` is declared.

On CPU tensors each tile is folded by TRL's torch twin of its Triton kernel
(``_forward_tile`` / ``_backward_tile``: ``_use_triton`` is CUDA/XPU only);
with ``LPH_DEVICE=cuda`` the Triton kernels run (not run here).

On CPU tensors it declares ``max_hidden_rows`` (``harness.cases.limits``): the
torch twins cost milliseconds per row, so the check over a thousand row blocks
reads UNSUPPORTED with the bound named.

Not declared, hence UNSUPPORTED: ``hidden_tp`` (TRL's head is never sharded by
vocabulary: FSDP's DTensor head is gathered whole first), ``chunking`` (the
chunk is a vocabulary width, not the protocol's rows), ``entropy_gate`` (the
Function has no switch: a trainer that wants a graph-free entropy detaches it
itself).
"""

from __future__ import annotations

from pathlib import Path

import torch.distributed as dist

from harness.ranks.device import device_type
from harness.targets.protocol import Target
from harness.targets.trl import loading

# On CPU tensors the torch twins of TRL's kernels cost about 3.5 ms per row (fp32, H 2, V 4: 14.5 s for 4096 rows,
# 115 s for 32768, TRL 1.15.0): a thousand 256-row blocks would take a quarter of an hour per call.
CPU_CASE_LIMITS = {"max_hidden_rows": 16_384}


class TRLHiddenTarget(Target):
    capabilities = frozenset({"hidden", "entropy", "temperature"})

    def __init__(self, root=None):
        self.case_limits = CPU_CASE_LIMITS if device_type() == "cpu" else None
        self.root = loading.trl_root() if root is None else Path(root)
        self.name = f"trl-{loading.trl_version(self.root)}-chunked"
        self.function = loading.kernels(self.root).chunked.ChunkedLogProbFunction
        self.vocab_chunk = loading.chunk_default(self.root)

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        if tp_group is not None and dist.get_world_size(tp_group) != 1:
            raise RuntimeError(f"{self.name}: one rank only (capability hidden_tp not declared)")
        if chunk_size is not None or (with_entropy and not entropy_grad):
            raise RuntimeError(f"{self.name}: no row chunk and no entropy gate (capabilities not declared)")
        outputs = ("entropy",) if with_entropy else ()
        log_probs, entropy, *_ = self.function.apply(
            hidden, weight, None, targets, temperature, self.vocab_chunk, None, 1.0, outputs
        )
        return log_probs, entropy
