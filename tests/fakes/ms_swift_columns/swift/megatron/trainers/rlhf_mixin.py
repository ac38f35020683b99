"""Stand-in (tests only): the RLHF mixin's CP gather, which ms-swift's GRPO step called until #9471 (written here).

Its module-level import of an absent package stands for the real file's trainer stack: only the method can be
loaded.
"""

import torch
from megatron.core import mpu
from swift.megatron.trainers.base import BaseMegatronTrainer


class MegatronRLHFTrainer(BaseMegatronTrainer):
    def _postprocess_packed_tensor_cp(self, tensor, packed_seq_params, num_samples):
        """``[1, rows]`` of every CP rank gathered; each sequence's 2·cp zigzag chunks back in order."""
        cp = self.args.context_parallel_size
        gathered = [torch.empty_like(tensor) for _ in range(cp)]
        torch.distributed.all_gather(gathered, tensor.contiguous(), group=mpu.get_context_parallel_group())
        gathered[mpu.get_context_parallel_rank()] = tensor  # the rank's own rows keep their graph
        bounds = packed_seq_params.cu_seqlens_q[: num_samples + 1].tolist()
        out, offset = [], 0
        for length in (end - start for start, end in zip(bounds[:-1], bounds[1:])):
            half = length // (2 * cp)
            heads = [part[:, offset : offset + half] for part in gathered]
            tails = [part[:, offset + half : offset + 2 * half] for part in gathered]
            out += heads + tails[::-1]
            offset += 2 * half
        return torch.cat(out, dim=1)
