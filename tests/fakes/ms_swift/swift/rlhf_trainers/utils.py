"""Stand-in (tests only): the padding-free to batch step the GRPO forward step calls (written here)."""

from swift.utils import get_cu_seqlens_from_position_ids


def pad_logps_back_to_batch(logps_rmpad, position_ids=None, logits_to_keep=None, batch_size=None, seq_lengths=None,
                            dtype=None, pad_value=-1e10):  # fmt: skip
    """``[1, Σ lengths]`` to ``[batch_size, logits_to_keep]``, each sequence right-aligned (left padding)."""
    if seq_lengths is None:
        seq_lengths = get_cu_seqlens_from_position_ids(position_ids).diff()
    out = logps_rmpad.new_full((batch_size, logits_to_keep), pad_value)
    start = 0
    for i, length in enumerate(seq_lengths.tolist()):
        out[i, logits_to_keep - length :] = logps_rmpad[0, start : start + length]
        start += length
    return out, None
