"""The ``trl`` family's target (SPEC ``trl==X`` / ``trl=PATH``): TRL's token helpers, chunked LM head and GRPO loss.

Token level: ``selective_log_softmax`` / ``selective_log_softmax_and_entropy``
(``harness.targets.trl.token:TRLTokenTarget``); hidden states:
``ChunkedLogProbFunction`` (``harness.targets.trl.hidden``). Capabilities:
``harness.targets.upstream.combined`` (``entropy_gate`` is the token path's
only, so the family leaves it out; ``TRLTokenTarget`` alone checks it); a release
without ``trl/kernels/`` (before 1.15) is the token path alone. TRL's
Triton kernel alone is ``harness.targets.trl.token:TRLTritonTarget``.
"""

from __future__ import annotations

from harness.targets.trl import loading
from harness.targets.trl.hidden import TRLHiddenTarget
from harness.targets.trl.policy import GRPO_TRAINER, TRLPolicyTarget
from harness.targets.trl.token import TRLTokenTarget
from harness.targets.upstream.combined import TokenAndHidden


class TRLFamilyTarget(TokenAndHidden):
    files_under_test = (
        "trl/trainer/utils.py",
        "trl/kernels/chunked_logprob.py",
        "trl/kernels/logprob_entropy.py",
        str(GRPO_TRAINER),
    )

    def __init__(self, root=None):
        token = TRLTokenTarget(root)
        chunked = loading.kernels(token.root).chunked is not None  # TRL < 1.15: no chunked LM head
        super().__init__(token, TRLHiddenTarget(token.root) if chunked else None, token.name)
        self.policy = None
        if not chunked:  # the releases a history replay reaches before 1.15: their token path alone
            return
        try:
            self.policy = TRLPolicyTarget(token.root)
        except (FileNotFoundError, LookupError):  # a tree without GRPOTrainer._compute_loss: no policy loss
            self.policy = None
        else:
            self.capabilities = self.capabilities | self.policy.capabilities

    def token_policy_loss(self, log_probs, **arguments):
        return self.policy.token_policy_loss(log_probs, **arguments)
