"""Stand-in for NeMo-RL's ``nemo_rl/algorithms/loss/interfaces.py``: its names, written for the harness's tests.

It imports ``BatchedDataDict`` from a package that is not installed, as the
real module does, so the adapter must load these names alone.
"""

import enum
from typing import Any, Protocol

from nemo_rl.distributed.batched_data_dict import BatchedDataDict


class LossType(enum.Enum):
    TOKEN_LEVEL = "token_level"
    SEQUENCE_LEVEL = "sequence_level"


class MetricNormalizer(enum.Enum):
    TOKENS = "tokens"
    SEQUENCES = "sequences"
    NONE = "none"


class LossInputType(enum.Enum):
    LOGPROB = "logprob"


class LossFunction(Protocol):
    loss_type: LossType
    input_type: LossInputType

    def __call__(self, data: BatchedDataDict, global_valid_seqs, global_valid_toks, **kwargs: Any): ...
