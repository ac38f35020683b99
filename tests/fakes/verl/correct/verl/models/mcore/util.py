"""Stand-in (tests only): verl's thd packing helpers, plain torch, written from their contract.

``preprocess_thd_engine`` pads each nested sequence to a multiple of
``tp·cp·2`` (zigzag; ``tp·cp`` contiguous), optionally rolls it by one within
the sequence (the labels), and returns this CP rank's rows; ``postprocess_thd_engine``
all-gathers an output over CP (other ranks' rows detached) and cuts it back
into the sequences. ``ROLL`` is what a defective tree changes.
"""

import torch
from megatron.core import parallel_state as mpu
from megatron.core.packed_seq_params import PackedSeqParams

ROLL = "per_sequence"  # "per_chunk": each rank's chunk rolled on its own (a label-shift defect)


def _align(cp_layout):
    cp = mpu.get_context_parallel_world_size()
    return mpu.get_tensor_model_parallel_world_size() * cp * (2 if cp > 1 and cp_layout == "zigzag" else 1)


def _rank_pieces(length, start, cp, rank, cp_layout, total):
    """(start, stop) of this rank's pieces of a padded sequence at ``start`` of a global stream of ``total`` rows."""
    if cp == 1:
        return [(start, start + length)]
    if cp_layout == "contiguous":
        piece = total // cp
        return [(max(start, rank * piece), min(start + length, (rank + 1) * piece))]
    chunk = length // (2 * cp)
    late = 2 * cp - 1 - rank
    return [(start + rank * chunk, start + (rank + 1) * chunk), (start + late * chunk, start + (late + 1) * chunk)]


def preprocess_thd_engine(input_ids, pre_process=True, need_roll=False, cp_layout="zigzag"):
    cp, rank = mpu.get_context_parallel_world_size(), mpu.get_context_parallel_rank()
    align = _align(cp_layout)
    lengths = input_ids.offsets().diff().tolist()
    padded = [-(-n // align) * align for n in lengths]
    cu = torch.tensor([0, *torch.tensor(padded).cumsum(0).tolist()], dtype=torch.int32)
    total = int(cu[-1])
    local = []
    for i, (n, p) in enumerate(zip(lengths, padded)):
        sequence = torch.zeros(p, dtype=input_ids.dtype)
        values = input_ids[i]
        sequence[:n] = torch.roll(values, -1) if need_roll and ROLL == "per_sequence" else values
        for lo, hi in _rank_pieces(p, int(cu[i]), cp, rank, cp_layout, total):
            piece = sequence[max(lo - int(cu[i]), 0) : max(hi - int(cu[i]), 0)]
            local.append(torch.roll(piece, -1) if need_roll and ROLL == "per_chunk" else piece)
    stream = torch.cat(local) if local else torch.zeros(0, dtype=input_ids.dtype)
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q_padded=cu, cp_partition_mode=cp_layout)
    return stream.unsqueeze(0), params, None


def postprocess_thd_engine(output, packed_seq_params, input_ids, batch_size, post_process=True, cp_layout="zigzag"):
    cp, rank = mpu.get_context_parallel_world_size(), mpu.get_context_parallel_rank()
    parts = [output[0]]
    if cp > 1:
        parts = [torch.empty_like(output[0]) for _ in range(cp)]
        torch.distributed.all_gather(parts, output[0].detach().contiguous(), group=mpu.get_context_parallel_group())
        parts[rank] = output[0]
    cu = packed_seq_params.cu_seqlens_q_padded.tolist()
    lengths = input_ids.offsets().diff().tolist()
    rows = [[] for _ in range(cu[-1])]
    for r, part in enumerate(parts):
        taken = 0
        for i in range(batch_size):
            for lo, hi in _rank_pieces(cu[i + 1] - cu[i], cu[i], cp, r, cp_layout, cu[-1]):
                for g in range(lo, hi):
                    rows[g] = part[taken]
                    taken += 1
    sequences = [torch.stack(rows[cu[i] : cu[i] + lengths[i]]) for i in range(batch_size)]
    return torch.nested.as_nested_tensor(sequences, layout=torch.jagged)
