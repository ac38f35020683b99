"""Stand-in for vLLM's ``vllm/v1/sample/logits_processor/builtin.py``: ``MinPLogitsProcessor``'s lifecycle
(constructed with a config, told the batch's requests by ``update_state``, then ``apply``) with correct,
independently written arithmetic: drop ``z < max z + log(min_p)``.

The import below names a module that does not exist here, as the real file's does: the adapter stands its
names in.
"""

import math

import torch
from vllm.v1.sample.logits_processor.interface import BatchUpdate, LogitsProcessor, MoveDirectionality  # noqa: F401


class MinPLogitsProcessor(LogitsProcessor):
    def __init__(self, vllm_config, device, is_pin_memory):
        self.values = [0.0] * vllm_config.scheduler_config.max_num_seqs

    def update_state(self, batch_update: BatchUpdate | None):
        for index, params, _, _ in batch_update.added:
            self.values[index] = params.min_p
        self.size = batch_update.batch_size

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row in range(self.size):
            if self.values[row]:
                cut = logits[row].max() + math.log(self.values[row])
                logits[row] = logits[row].masked_fill(logits[row] < cut, -math.inf)
        return logits
