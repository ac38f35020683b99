"""The packed batch a trainer hands over besides the logits, and the per-sample output type.

Its own module so that both the packed path (``impl.packed``) and context
parallelism (``impl.context_parallel``) build on it without importing each
other: the two used to import each other, one of them lazily inside a
function to dodge the cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

QKV_FORMATS = ("thd", "bshd")


@dataclass(frozen=True)
class PackedBatch:
    """What a trainer knows about a packed batch besides the logits.

    Attributes:
        tokens: per sample, its full token ids ``y_i`` (length ``T_i``), int64.
        total_lengths: ``T_i = P_i + R_i`` per sample.
        response_lengths: ``R_i`` per sample (``0 <= R_i <= T_i - 1``).
        qkv_format: ``"thd"`` (samples concatenated, end padding) or
            ``"bshd"`` (``[B, S]``, every sample padded to ``S``).
        loss_masks: per sample, ``R_i`` zeros/ones (None means all ones).
    """

    tokens: list
    total_lengths: list
    response_lengths: list
    qkv_format: str = "thd"
    loss_masks: list | None = None

    def __post_init__(self):
        validate_batch(self)


@dataclass
class PackedOutput:
    """Per-sample outputs; ``entropy`` is None unless requested."""

    log_probs: list
    entropy: list | None


def validate_batch(batch: PackedBatch) -> None:
    """Reject inconsistent metadata with an error naming the field and the fix."""
    n = len(batch.total_lengths)
    if len(batch.response_lengths) != n or len(batch.tokens) != n:
        raise ValueError(
            f"tokens ({len(batch.tokens)}), total_lengths ({n}) and response_lengths "
            f"({len(batch.response_lengths)}) must have one entry per sample"
        )
    if batch.qkv_format not in QKV_FORMATS:
        raise ValueError(f"qkv_format must be one of {QKV_FORMATS}, got {batch.qkv_format!r}")
    for i, (tokens, total, response) in enumerate(zip(batch.tokens, batch.total_lengths, batch.response_lengths)):
        if not isinstance(total, int) or not isinstance(response, int):
            raise TypeError(f"total_lengths[{i}] and response_lengths[{i}] must be Python ints")
        if not 0 <= response <= total - 1:
            raise ValueError(
                f"response_lengths[{i}]={response} must be in [0, total_lengths[{i}] - 1 = {total - 1}]: "
                "every sample needs a prompt of at least one token"
            )
        if tokens.dim() != 1 or tokens.shape[0] != total:
            raise ValueError(
                f"tokens[{i}] has shape {tuple(tokens.shape)} but total_lengths[{i}]={total}; "
                "pass each sample's full token ids"
            )
    if batch.loss_masks is not None:
        if len(batch.loss_masks) != n:
            raise ValueError(f"loss_masks has {len(batch.loss_masks)} entries for {n} samples")
        for i, (mask, response) in enumerate(zip(batch.loss_masks, batch.response_lengths)):
            if mask.dim() != 1 or mask.shape[0] != response:
                raise ValueError(f"loss_masks[{i}] has shape {tuple(mask.shape)} but response_lengths[{i}]={response}")
