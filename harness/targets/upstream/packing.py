"""The packed-sequence conventions NeMo-RL and SkyRL share, mapped onto the harness's layouts.

Both projects' ``from_parallel_logits_to_logprobs_packed_sequences`` take a thd
stream ``[1, T // CP, V_local]``, the FULL stream's unrolled token ids
``[1, T]`` and ``cu_seqlens_padded`` (start of each sequence in the full,
per-sequence padded stream; under CP each sequence is padded to a multiple of
``2·cp`` and CP rank ``r`` holds its chunks ``r`` and ``2cp−1−r``, the
rows ``[cu[i] // cp, cu[i+1] // cp)`` of its local stream). They roll each
sequence's targets themselves and return ``[B, unpacked_seqlen − 1]``, row
``i`` holding the log-prob of token ``p + 1`` at column ``p``.

That is docs/math.md's zigzag layout with sequence ``i`` padded to ``2·cp·c_i``
(``c_i = ceil(T_i / 2cp)``); without CP, to ``T_i`` itself. The harness's
end padding of the stream lies outside every sequence; neither project has a
place for it, so the adapters pass the logits without those rows (a view: the
padding rows then get exactly zero gradient).

Written here from docs/math.md, not from ``oracles/`` (the adapter must not share
the oracle's layout code, or a layout bug would hide itself).
"""

from __future__ import annotations

import torch

from harness.targets.protocol import PackedInputs


def padded_lengths(inputs: PackedInputs, cp: int) -> list[int]:
    """Each sequence's length in the upstream's padded stream: ``T_i``, or ``2·cp·ceil(T_i / 2cp)`` under CP."""
    if cp == 1:
        return list(inputs.total_lengths)
    return [2 * cp * -(-total // (2 * cp)) for total in inputs.total_lengths]


def cu_seqlens_padded(inputs: PackedInputs, cp: int, device) -> torch.Tensor:
    lengths = padded_lengths(inputs, cp)
    starts = [0]
    for length in lengths:
        starts.append(starts[-1] + length)
    return torch.tensor(starts, dtype=torch.int32, device=device)


def full_stream_tokens(inputs: PackedInputs, cp: int, device) -> torch.Tensor:
    """``[1, Σ padded lengths]``: each sample's token ids at its start, zeros in its padding."""
    lengths = padded_lengths(inputs, cp)
    stream = torch.zeros(sum(lengths), dtype=torch.long, device=device)
    start = 0
    for tokens, length in zip(inputs.tokens, lengths):
        stream[start : start + tokens.numel()] = tokens.to(device=device, dtype=torch.long)
        start += length
    return stream.unsqueeze(0)


def local_sequence_rows(inputs: PackedInputs, cp: int) -> int:
    """Rows of this rank's stream that belong to a sequence (the rest is the harness's end padding)."""
    return sum(padded_lengths(inputs, cp)) // cp


def view_positions(inputs: PackedInputs, cp: int, cp_rank: int) -> list[list[int]]:
    """Per sample, the predicting positions of this CP rank's zigzag view (docs/math.md), in order."""
    views = []
    for total, response in zip(inputs.total_lengths, inputs.response_lengths):
        first = total - response - 1
        positions = range(max(first, 0), total - 1)
        if cp == 1:
            views.append(list(positions))
            continue
        chunk = -(-total // (2 * cp))
        mine = (cp_rank, 2 * cp - 1 - cp_rank)
        views.append([p for p in positions if p // chunk in mine])
    return views


def view_local_rows(inputs: PackedInputs, cp: int, cp_rank: int) -> list[list[int]]:
    """Per sample, this rank's local row of each position of its zigzag view."""
    lengths = padded_lengths(inputs, cp)
    rows, start = [], 0
    for length, positions in zip(lengths, view_positions(inputs, cp, cp_rank)):
        if cp == 1:
            rows.append([start + p for p in positions])
        else:
            chunk = length // (2 * cp)
            rows.append([start + (p % chunk if p // chunk == cp_rank else chunk + p % chunk) for p in positions])
        start += length // cp
    return rows


def per_sample_view(unpacked: torch.Tensor, inputs: PackedInputs, cp: int, cp_rank: int) -> list[torch.Tensor]:
    """This rank's zigzag view of each sample's response, from the upstream's ``[B, unpacked − 1]`` output."""
    return [
        unpacked[i, torch.tensor(positions, dtype=torch.long, device=unpacked.device)]
        for i, positions in enumerate(view_positions(inputs, cp, cp_rank))
    ]


def per_sample_rows(per_row: torch.Tensor, inputs: PackedInputs, cp: int, cp_rank: int) -> list[torch.Tensor]:
    """Per-row values (e.g. entropy of each local row) picked into each sample's zigzag view."""
    return [
        per_row[torch.tensor(rows, dtype=torch.long, device=per_row.device)]
        for rows in view_local_rows(inputs, cp, cp_rank)
    ]


def call_packed_entry(fn, call, logits, **keywords):
    """``from_parallel_logits_to_logprobs_packed_sequences`` as both projects' wrappers call it, on this rank's
    stream without the harness's end padding: ``(out [B, U - 1], the stream [T // cp, V_local], cp, cp_rank)``."""
    cp, cp_rank = call.cp
    start, end = call.vocab_bounds
    stream = logits[: local_sequence_rows(call.inputs, cp)]
    out = fn(
        stream.unsqueeze(0),
        full_stream_tokens(call.inputs, cp, logits.device),
        cu_seqlens_padded(call.inputs, cp, logits.device),
        unpacked_length(call.inputs, cp),
        start,
        end,
        call.group,
        cp_group=call.cp_group,
        **keywords,
    )
    return out, stream, cp, cp_rank


def unpacked_length(inputs: PackedInputs, cp: int) -> int:
    """An ``unpacked_seqlen`` long enough for every sequence's padded length."""
    return max(padded_lengths(inputs, cp), default=1)
