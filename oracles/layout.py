"""Which logits row predicts which response token (docs/math.md, "Layouts of the logits rows").

Plain integer arithmetic, written from docs/math.md and independent of ``impl/``.
Sample ``i`` has ``T_i = P_i + R_i`` tokens (prompt ``P_i >= 1``); the logit
row at sample position ``p`` predicts ``y_i[p + 1]``, so its response is
predicted by positions ``[P_i - 1, T_i - 1)`` with targets ``y_i[P_i:T_i]``.

- thd: samples concatenated (``off_i = sum_{j<i} T_j``), the stream end-padded
  to a multiple of ``pad_multiple``; sample ``i`` position ``p`` is row ``off_i + p``.
- bshd: ``[B, S]``, ``S`` the smallest multiple of ``pad_multiple`` >= every
  ``T_i``; sample ``i`` position ``p`` is row ``i * S + p`` of the flat stream.

Conventions: with no samples (or no tokens) the stream is empty, 0 rows,
bshd ``S = 0``. ``R_i = 0`` gives an empty row list. Bad arguments raise
``ValueError`` naming the argument.
"""

from __future__ import annotations

import math

QKV_FORMATS = ("thd", "bshd")


def padded_length(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (the trainer's ``pad_multiple``, >= 1)."""
    if multiple < 1:
        raise ValueError(f"pad_multiple must be >= 1, got {multiple}")
    return math.ceil(n / multiple) * multiple


def _check_format(qkv_format: str) -> None:
    if qkv_format not in QKV_FORMATS:
        raise ValueError(f"qkv_format must be 'thd' or 'bshd', got {qkv_format!r}")


def _validate(total_lengths, response_lengths, qkv_format: str, pad_multiple: int) -> None:
    """docs/math.md "Packed batches": one (T_i, R_i) per sample, ``0 <= R_i <= T_i - 1`` (``P_i >= 1``)."""
    padded_length(0, pad_multiple)
    _check_format(qkv_format)
    if len(total_lengths) != len(response_lengths):
        raise ValueError(
            f"total_lengths ({len(total_lengths)}) and response_lengths "
            f"({len(response_lengths)}) need one entry per sample"
        )
    for i, (total, response) in enumerate(zip(total_lengths, response_lengths)):
        if not 0 <= response <= total - 1:
            raise ValueError(
                f"response_lengths[{i}]={response} needs a prompt of at least one token "
                f"(P_i >= 1): 0 <= R <= T - 1 = {total - 1} (total_lengths[{i}]={total})"
            )


def thd_stream_length(total_lengths, pad_multiple: int) -> int:
    """thd rows: ``sum_i T_i`` rounded up to a multiple of ``pad_multiple``."""
    return padded_length(sum(total_lengths), pad_multiple)


def bshd_seq_len(total_lengths, pad_multiple: int) -> int:
    """bshd ``S``: the smallest multiple of ``pad_multiple`` >= every ``T_i`` (0 with no samples)."""
    return padded_length(max(total_lengths, default=0), pad_multiple)


def stream_rows(total_lengths, qkv_format: str, pad_multiple: int) -> int:
    """Number of logits rows of the layout (thd: padded stream; bshd: ``B * S``)."""
    _check_format(qkv_format)
    if qkv_format == "thd":
        return thd_stream_length(total_lengths, pad_multiple)
    return len(total_lengths) * bshd_seq_len(total_lengths, pad_multiple)


def sample_starts(total_lengths, qkv_format: str, pad_multiple: int) -> list[int]:
    """Global row of each sample's position 0 (thd ``off_i``, bshd ``i * S``)."""
    _check_format(qkv_format)
    if qkv_format == "bshd":
        seq_len = bshd_seq_len(total_lengths, pad_multiple)
        return [i * seq_len for i in range(len(total_lengths))]
    padded_length(0, pad_multiple)
    return [sum(total_lengths[:i]) for i in range(len(total_lengths))]


def response_rows(total_lengths, response_lengths, qkv_format: str, pad_multiple: int) -> list[list[int]]:
    """Per sample, the global rows predicting its response, in order: ``start_i + p``, ``p in [P_i - 1, T_i - 1)``."""
    _validate(total_lengths, response_lengths, qkv_format, pad_multiple)
    starts = sample_starts(total_lengths, qkv_format, pad_multiple)
    return [
        [start + p for p in range(total - response - 1, total - 1)]
        for start, total, response in zip(starts, total_lengths, response_lengths)
    ]


def response_targets(tokens, response_lengths) -> list:
    """Per sample, the response token ids ``y_i[P_i:T_i]`` (the last ``R_i`` tokens)."""
    if len(tokens) != len(response_lengths):
        raise ValueError(f"tokens ({len(tokens)}) and response_lengths ({len(response_lengths)}) differ in length")
    return [t[t.shape[0] - response :] for t, response in zip(tokens, response_lengths)]


def sample_position_of_row(row: int, total_lengths, qkv_format: str, pad_multiple: int) -> tuple[int, int] | None:
    """Inverse placement: ``(sample, position)`` held by a global row, or None for a padding row.

    Written as a scan (thd) and a ``divmod`` (bshd) rather than from
    ``sample_starts``, so the self-tests check two independent derivations.
    """
    if not 0 <= row < stream_rows(total_lengths, qkv_format, pad_multiple):
        raise ValueError(f"row {row} is outside the {qkv_format} stream")
    if qkv_format == "bshd":
        sample, position = divmod(row, bshd_seq_len(total_lengths, pad_multiple))
        return (sample, position) if position < total_lengths[sample] else None
    for sample, total in enumerate(total_lengths):
        if row < total:
            return sample, row
        row -= total
    return None


# ---- context parallelism ----------------------------------------------------------
# A local row is described as (sample, position) or None (padding: nothing is
# predicted from it). Written from docs/math.md, independently of impl/.


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
