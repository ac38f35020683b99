"""Stand-in (tests only): verl's Megatron engine, its logits processor with the signature and steps of verl's.

The module-level imports name what verl's engine module imports (Megatron's
pipeline schedule, the engine base); the harness loads the one method and
only what it reads, so they never run. ``DIVIDE`` is what a defective tree
changes (a composition that leaves out its temperature step).
"""

from collections.abc import Callable

import torch  # noqa: F401
from megatron.core.pipeline_parallel import get_forward_backward_func  # noqa: F401  (never executed)
from tensordict import TensorDict
from verl.utils.megatron.tensor_parallel import (
    vocab_parallel_entropy,
    vocab_parallel_entropy_with_chunking,
    vocab_parallel_log_probs_from_logits,
)

from ..base import BaseEngine  # noqa: F401  (never executed)

DIVIDE = True


class MegatronEngineWithLMHead(BaseEngine):  # noqa: F821
    def _lm_head_logits_processor(
        self, logits, label, temperature, *, calculate_entropy: bool, logits_processor_func: Callable,
        batch: TensorDict, data_format: str,
    ):  # fmt: skip
        assert logits.shape[:2] == label.shape[:2]
        temperature[temperature <= 0] = 1e-8
        if DIVIDE:
            logits.div_(temperature.unsqueeze(-1).to(logits.dtype))
        result = {}
        backup = logits
        if calculate_entropy:
            backup = logits.clone()  # the entropy's backward may write its input
            config = self.engine_config
            if config.entropy_from_logits_with_chunking:
                result["entropy"] = vocab_parallel_entropy_with_chunking(
                    logits, chunk_size=config.entropy_from_logits_chunk_size
                )
            else:
                result["entropy"] = vocab_parallel_entropy(logits)
        result["log_probs"] = vocab_parallel_log_probs_from_logits(backup, label)
        return result
