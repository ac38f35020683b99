"""Stand-in for TRL's base configuration: it derives from transformers (absent here), as TRL's does."""

from dataclasses import dataclass

from transformers import TrainingArguments


@dataclass
class _BaseConfig(TrainingArguments):
    pass
