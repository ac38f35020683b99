"""Stand-in for TRL's GRPO settings: a dataclass on a base from an absent package, with the fields the loss reads."""

from dataclasses import dataclass, field

from .base_config import _BaseConfig


@dataclass
class GRPOConfig(_BaseConfig):
    _VALID_DICT_FIELDS = _BaseConfig._VALID_DICT_FIELDS + ["model_init_kwargs"]

    beta: float = field(default=0.0, metadata={"help": "KL coefficient"})
    delta: float | None = field(default=None, metadata={"help": "two-sided clip"})
    epsilon: float = 0.2
    loss_type: str = "dapo"
    max_completion_length: int | None = 256
    use_bias_correction_kl: bool = False
