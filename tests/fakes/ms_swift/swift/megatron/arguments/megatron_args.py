"""Stand-in (tests only): the Megatron RLHF arguments' fields the GRPO loss reads (written here)."""

from dataclasses import dataclass
from typing import Literal

from swift.utils import get_logger

logger = get_logger()


@dataclass
class RLHFMegatronArgumentsMixin:
    loss_type: str | None = None
    beta: float | None = None
    max_completion_length: int = 512
    importance_sampling_level: Literal["token", "sequence", "sequence_token"] = "token"
    epsilon: float = 0.2
    epsilon_high: float | None = None
    delta: float | None = None

    def __post_init__(self):
        logger.info("never run by the harness: it reads the fields only")
