"""Stand-in for Megatron-core's tensor-parallel utilities: ``VocabUtility`` (the file imports CUDA helpers too)."""

from collections.abc import Sequence

import torch  # noqa: F401
from megatron.core.utils import divide


class VocabUtility:
    @staticmethod
    def vocab_range_from_per_partition_vocab_size(
        per_partition_vocab_size: int, rank, world_size: int
    ) -> Sequence[int]:
        first = rank * per_partition_vocab_size
        return first, first + per_partition_vocab_size

    @staticmethod
    def vocab_range_from_global_vocab_size(global_vocab_size: int, rank: int, world_size: int) -> Sequence[int]:
        return VocabUtility.vocab_range_from_per_partition_vocab_size(
            divide(global_vocab_size, world_size), rank, world_size
        )
