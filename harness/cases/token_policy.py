"""A Case's inputs to the token-level policy loss: ``[B, R]`` response matrices (docs/targets.md).

The token-level entry point (``Target.token_policy_loss``) receives log-probs,
not logits, so the Case is turned into what a trainer's loss function holds:
its samples' float64 oracle log-probs and entropies rounded to float32 (the
dtype trainers keep log-probs in), and the behaviour, reference and rollout
log-probs and advantages of ``harness.cases.policy``, each sample a row
left-aligned and padded with zeros (mask 0) to the longest response. Both the
job and the expected values read them from here, so the two sides can never
disagree on the inputs; the oracle reads the float32 values as sent.

The behaviour log-probs keep ``harness.cases.policy``'s clip-boundary margin
from the oracle's log-probs, which the sent ones differ from by half a
float32 ulp, far inside it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from harness.cases import policy
from harness.cases.case import Case
from oracles import losses, token


@dataclass(frozen=True)
class TokenPolicyInputs:
    """Per-sample float32 values (``samples``) and their ``[B, R]`` matrices (``matrix``)."""

    log_probs: list
    entropy: list | None
    old_log_probs: list
    advantages: list
    loss_masks: list
    ref_log_probs: list | None
    rollout_log_probs: list | None

    @property
    def width(self) -> int:
        """``R``: the longest response (0 when every response is empty)."""
        return max((int(v.numel()) for v in self.log_probs), default=0)

    def matrix(self, values: list) -> torch.Tensor:
        """``[B, R]`` float32, each row a sample's values then zeros."""
        rows = [torch.nn.functional.pad(v.float(), (0, self.width - v.numel())) for v in values]
        return torch.stack(rows) if rows else torch.zeros(0, self.width)


def inputs(case: Case) -> TokenPolicyInputs:
    """The Case's token-level policy-loss inputs (float32 values, as the target receives them).

    Computed once per Case (the job and the reference both read them; every
    consumer copies before it differentiates or pads).
    """
    return _inputs(case.to_json())


@functools.lru_cache(maxsize=8)
def _inputs(case_json: str) -> TokenPolicyInputs:
    case = Case.from_json(case_json)
    opts = policy.loss_options(case)
    with torch.no_grad():
        logits = case.global_logits().double()
        log_probs = policy.per_sample_log_probs(case, logits, token.log_probs)
        entropy = None
        if case.with_entropy:
            entropy = [token.entropy(z, case.temperature) for z in losses.per_sample(logits, case.response_rows())]
    return TokenPolicyInputs(
        log_probs=policy.as_sent(log_probs),
        entropy=None if entropy is None else policy.as_sent(entropy),
        old_log_probs=policy.as_sent(policy.old_log_probs(case)),
        advantages=policy.as_sent(case.advantages()),
        loss_masks=[m.double() for m in case.loss_masks()],
        ref_log_probs=policy.ref_log_probs(case) if opts.kl_coef != 0 else None,
        rollout_log_probs=policy.rollout_log_probs(case) if opts.rollout_correction else None,
    )
