"""Stand-in (tests only): the Megatron trainers' CP helper the GRPO forward step calls (written here).

Its module-level import of an absent package stands for the real file's heavy imports: only the function can
be loaded.
"""

import torch
from megatron.core import mpu
from swift.utils import get_logger  # noqa: F401


def reconstruct_tensor_cp(cp_size, tensor, packed_seq_params, num_samples, cp_partition_mode="zigzag"):
    """Every CP rank's ``[1, rows]`` gathered, each sequence's 2·cp chunks put back in order (own rows in the graph)."""
    parts = [torch.empty_like(tensor) for _ in range(cp_size)]
    torch.distributed.all_gather(parts, tensor.contiguous(), group=mpu.get_context_parallel_group())
    parts[mpu.get_context_parallel_rank()] = tensor
    cu = packed_seq_params.cu_seqlens_q[: num_samples + 1].tolist()
    pieces, local_start = [], 0
    for start, end in zip(cu[:-1], cu[1:]):
        chunk = (end - start) // (2 * cp_size)
        order = [None] * (2 * cp_size)
        for rank, part in enumerate(parts):
            mine = part[:, local_start : local_start + 2 * chunk]
            order[rank], order[2 * cp_size - 1 - rank] = mine[:, :chunk], mine[:, chunk:]
        pieces += order
        local_start += 2 * chunk
    return torch.cat(pieces, dim=1)
