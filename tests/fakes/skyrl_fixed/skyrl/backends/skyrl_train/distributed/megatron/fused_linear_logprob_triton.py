"""Stand-in for SkyRL 0.3.0's Triton backend module: its Function's name and its CUDA-only guard, nothing else.

``harness/targets/skyrl/family.py`` loads this file by path as it loads the
real one; on a CPU run the adapter declares no capability for it, so this
Function is never applied by the suite there.
"""

import torch


class FusedLinearLogprobTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, vocab_start_index, vocab_end_index, chunk_size, tp_group, inference_only):
        if not torch.cuda.is_available():
            raise RuntimeError("FusedLinearLogprobTriton requires Triton (and a CUDA device)")
        raise NotImplementedError("stand-in: no kernel")
