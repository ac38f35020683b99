"""The policy-loss inputs a Case implies besides its logits: clip range and behaviour-policy log-probs.

Both the rank-side job (which hands them to the target) and the expected
values (which differentiate the float64 loss) read them from here, so the two
sides can never disagree on the inputs of the loss they compare.
"""

from __future__ import annotations

import torch

from harness.cases.case import Case
from oracles import losses

EPS_CLIP = 0.2
EPS_CLIP_HIGH = 0.28


def old_log_probs(case: Case) -> list[torch.Tensor]:
    """Behaviour-policy log-probs: oracle log-probs plus bounded offsets (ratios near 1, some clipped)."""
    with torch.no_grad():
        log_probs, _ = losses.packed_reference(
            case.global_logits().double(),
            case.tokens(),
            case.total_lengths,
            case.response_lengths,
            case.qkv_format,
            case.pad_multiple,
            case.temperature,
        )
    return [lp + offset for lp, offset in zip(log_probs, case.old_log_prob_offsets(), strict=True)]
