"""Ranks of a group agree on their call's metadata before any other collective: a mismatch fails, never hangs.

Each rank validates only what it holds. Ranks of a TP or CP group that
disagree about the call (CP ranks given different slice lengths, batch
metadata or options such as the chunk size or the entropy flag; TP ranks
holding vocabulary shards of different widths; one rank failing its local
checks) would otherwise issue different collectives, or collectives of
different shapes: a hang, a crash inside the backend, or a silently wrong
value on some ranks (docs/bugs.md #5 is the hang of this class).

So every rank of the group issues ONE all-gather of a small int64
fingerprint, unconditionally and first: a local-error flag, then one code
per named field. The collective never depends on the data, so the sequence
stays identical on every rank (the collective-trace property). Then every
rank reads the same table and raises the same ``ValueError`` naming the
first field that differs and which ranks hold which value; a rank that
failed its local checks raises its own error, and the others, after one more
collective that carries the error texts (only on this error path, issued by
every rank since every rank sees the same table), raise an error quoting it.

Scalars (ints, bools, floats, None) travel as their values, so the message
shows every rank's; strings and lists travel as a CRC-32 of their repr, so
the message shows this rank's value and which ranks differ.
"""

from __future__ import annotations

import struct
import zlib

import torch
import torch.distributed as dist

_NONE = -(2**62)
_TEXT = 2**40  # CRC codes are offset so they cannot collide with small ints


def _encode(value) -> int:
    if value is None:
        return _NONE
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return max(min(value, 2**62), -(2**62) + 1)
    if isinstance(value, float):
        return struct.unpack("<q", struct.pack("<d", value))[0]
    return _TEXT + zlib.crc32(repr(value).encode())


def _readable(value) -> bool:
    return value is None or isinstance(value, (bool, int, float))


def _decode(code: int, like):
    """The value behind ``code`` for a field whose local value is ``like`` (scalars only)."""
    if code == _NONE:
        return None
    if isinstance(like, float):
        return struct.unpack("<d", struct.pack("<q", code))[0]
    return code


_TEXT_BYTES = 480


def _gather_texts(group, size: int, text: str | None, device) -> list[str]:
    """Each rank's error text (truncated), gathered as fixed-size byte tensors (no pickling, no numpy)."""
    data = (text or "").encode()[:_TEXT_BYTES]
    mine = torch.zeros(_TEXT_BYTES, dtype=torch.uint8, device=device)
    if data:
        mine[: len(data)] = torch.tensor(list(data), dtype=torch.uint8, device=device)
    parts = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(parts, mine, group=group)
    return [bytes(part.cpu().tolist()).rstrip(b"\0").decode(errors="replace") for part in parts]


def group_size(group) -> tuple[int, int]:
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1, 0
    return dist.get_world_size(group), dist.get_rank(group)


def agree(group, group_name: str, fields: dict, *, local_error: Exception | None, device, fix: dict) -> None:
    """All-gather ``fields`` over ``group``; raise the same clear error on every rank if they differ.

    ``local_error`` is this rank's own validation failure (raised here, after
    the collective, so that its peers are not left waiting); ``fix`` maps a
    field name to the advice appended to its mismatch message.
    """
    size, my_rank = group_size(group)
    if size == 1:
        if local_error is not None:
            raise local_error
        return
    mine = [0 if local_error is None else 1] + [_encode(v) for v in fields.values()]
    vector = torch.tensor(mine, dtype=torch.long, device=device)
    parts = [torch.empty_like(vector) for _ in range(size)]
    dist.all_gather(parts, vector, group=group)
    table = torch.stack(parts).cpu().tolist()
    failed = [rank for rank, row in enumerate(table) if row[0]]
    if failed:
        # Every rank sees the same table, so every rank issues this second collective: the errors' text.
        texts = _gather_texts(
            group, size, None if local_error is None else f"{type(local_error).__name__}: {local_error}", device
        )
        if local_error is not None:
            raise local_error
        reasons = "; ".join(f"rank {rank}: {texts[rank]}" for rank in failed)
        raise ValueError(
            f"{group_name} rank(s) {failed} rejected their own inputs ({reasons}); this rank's inputs were "
            "valid: every rank of the group must be called with valid, matching arguments"
        )
    for k, (name, value) in enumerate(fields.items(), start=1):
        codes = [row[k] for row in table]
        if len(set(codes)) == 1:
            continue
        if _readable(value):
            holders: dict = {}
            for rank, code in enumerate(codes):
                holders.setdefault(_decode(code, value), []).append(rank)
            held = "; ".join(f"rank(s) {ranks}: {v!r}" for v, ranks in holders.items())
        else:
            others = [rank for rank, code in enumerate(codes) if code != codes[my_rank]]
            held = f"rank {my_rank}: {value!r}; rank(s) {others} hold a different value"
        raise ValueError(f"{group_name} ranks disagree on {name} ({held}): {fix.get(name, 'pass the same value')}")


TOKEN_CALL_FIXES = {
    "V_local (the vocabulary shard width)": "every TP rank must hold an equal contiguous shard of the padded "
    "vocabulary (pad V to a multiple of tp), and tp_group must be the group the vocabulary is sharded over",
    "evaluated rows": "TP ranks hold the same rows (only the vocabulary is sharded): pass the same logits rows "
    "(and rows=) on every rank of tp_group",
    "logits dtype": "every rank must pass logits of the same dtype (the statistics they exchange are computed in it)",
}


def token_call_fields(logits, rows, chunk_size, with_entropy, entropy_grad, temperature) -> dict:
    """What every TP rank of one call must agree on (computed defensively: the inputs may be invalid)."""
    shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else ()
    evaluated = rows.shape[0] if isinstance(rows, torch.Tensor) and rows.dim() == 1 else (shape or (-1,))[0]
    return {
        "V_local (the vocabulary shard width)": shape[-1] if shape else -1,
        "logits dtype": str(logits.dtype) if isinstance(logits, torch.Tensor) else "?",
        "evaluated rows": int(evaluated),
        "chunk_size": chunk_size if chunk_size is None or isinstance(chunk_size, int) else repr(chunk_size),
        "with_entropy": bool(with_entropy),
        "entropy_grad": bool(entropy_grad),
        "temperature": float(temperature) if isinstance(temperature, (int, float)) else repr(temperature),
    }
