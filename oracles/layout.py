"""Which logits row predicts which response token (MATH.md, "Layouts of the logits rows").

Plain integer arithmetic, written from MATH.md and independent of ``impl/``.
Row ``off_i + p`` (thd) or ``i * S + p`` (bshd) predicts ``y_i[p + 1]``; the
response of sample ``i`` is predicted by positions ``[P_i - 1, T_i - 1)``.
With no samples at all the stream is empty (0 rows; bshd ``S`` = 0).
"""

from __future__ import annotations

import math


def padded_length(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (>= 1)."""
    if multiple < 1:
        raise ValueError(f"pad_multiple must be >= 1, got {multiple}")
    return math.ceil(n / multiple) * multiple


def _validate(total_lengths, response_lengths, qkv_format: str) -> None:
    if len(total_lengths) != len(response_lengths):
        raise ValueError(
            f"total_lengths ({len(total_lengths)}) and response_lengths "
            f"({len(response_lengths)}) need one entry per sample"
        )
    if qkv_format not in ("thd", "bshd"):
        raise ValueError(f"qkv_format must be 'thd' or 'bshd', got {qkv_format!r}")
    for i, (total, response) in enumerate(zip(total_lengths, response_lengths)):
        if not 0 <= response <= total - 1:
            raise ValueError(f"response_lengths[{i}]={response} needs a prompt: 0 <= R <= T - 1 = {total - 1}")


def bshd_seq_len(total_lengths, pad_multiple: int) -> int:
    """``S``: the smallest multiple of ``pad_multiple`` >= every ``T_i``."""
    return padded_length(max(total_lengths, default=0), pad_multiple)


def stream_rows(total_lengths, qkv_format: str, pad_multiple: int) -> int:
    """Number of logits rows of the layout."""
    if qkv_format == "thd":
        return padded_length(sum(total_lengths), pad_multiple)
    if qkv_format == "bshd":
        return len(total_lengths) * bshd_seq_len(total_lengths, pad_multiple)
    raise ValueError(f"qkv_format must be 'thd' or 'bshd', got {qkv_format!r}")


def sample_starts(total_lengths, qkv_format: str, pad_multiple: int) -> list[int]:
    """Global row of each sample's position 0."""
    if qkv_format == "bshd":
        seq_len = bshd_seq_len(total_lengths, pad_multiple)
        return [i * seq_len for i in range(len(total_lengths))]
    return [sum(total_lengths[:i]) for i in range(len(total_lengths))]


def response_rows(total_lengths, response_lengths, qkv_format: str, pad_multiple: int) -> list[list[int]]:
    """Per sample, the global rows predicting its response tokens, in order."""
    _validate(total_lengths, response_lengths, qkv_format)
    padded_length(0, pad_multiple)
    starts = sample_starts(total_lengths, qkv_format, pad_multiple)
    return [
        [start + p for p in range(total - response - 1, total - 1)]
        for start, total, response in zip(starts, total_lengths, response_lengths)
    ]


def response_targets(tokens, response_lengths) -> list:
    """Per sample, the response token ids ``y_i[P_i:T_i]``."""
    return [t[t.shape[0] - response :] for t, response in zip(tokens, response_lengths)]


# ---- context parallelism ----------------------------------------------------------
# A local row is described as (sample, position) or None (padding: nothing is
# predicted from it). Written from MATH.md, independently of impl/.


def zigzag_chunk_length(total: int, cp: int) -> int:
    """``c_i = ceil(T_i / (2 cp))``."""
    return -(-total // (2 * cp))


def zigzag_local_rows(total_lengths, cp: int, cp_rank: int, pad_multiple: int) -> list:
    """CP rank ``cp_rank``'s rows: chunks ``r`` and ``2cp-1-r`` of every sample, in sample order, end-padded."""
    rows = []
    for sample, total in enumerate(total_lengths):
        c = zigzag_chunk_length(total, cp)
        for chunk in (cp_rank, 2 * cp - 1 - cp_rank):
            for position in range(chunk * c, (chunk + 1) * c):
                rows.append((sample, position) if position < total else None)
    return rows + [None] * (padded_length(len(rows), pad_multiple) - len(rows))


def allgather_local_rows(total_lengths, cp: int, cp_rank: int, pad_multiple: int) -> list:
    """CP rank ``cp_rank``'s contiguous slice of the packed stream, end-padded to a multiple of cp * pad_multiple."""
    stream = [(sample, position) for sample, total in enumerate(total_lengths) for position in range(total)]
    stream += [None] * (padded_length(len(stream), cp * pad_multiple) - len(stream))
    length = len(stream) // cp
    return stream[cp_rank * length : (cp_rank + 1) * length]


def local_rows(cp_mode: str, total_lengths, cp: int, cp_rank: int, pad_multiple: int) -> list:
    if cp_mode == "zigzag":
        return zigzag_local_rows(total_lengths, cp, cp_rank, pad_multiple)
    if cp_mode == "allgather":
        return allgather_local_rows(total_lengths, cp, cp_rank, pad_multiple)
    raise ValueError(f"cp_mode must be 'zigzag' or 'allgather', got {cp_mode!r}")


def zigzag_view(total_lengths, response_lengths, cp: int, cp_rank: int) -> list[list[int]]:
    """Per sample, the response indices CP rank ``cp_rank`` returns, in order (both CP modes return this view).

    Response index ``j`` is predicted by position ``P - 1 + j``; the rank returns
    the indices whose predicting position lies in chunk ``r``, then in chunk ``2cp-1-r``.
    """
    view = [[] for _ in total_lengths]
    for entry in zigzag_local_rows(total_lengths, cp, cp_rank, 1):
        if entry is None:
            continue
        sample, position = entry
        first = total_lengths[sample] - response_lengths[sample] - 1
        if first <= position < total_lengths[sample] - 1:
            view[sample].append(position - first)
    return view
