"""The ``trl`` family's target (SPEC ``trl==X`` / ``trl=PATH``): TRL's token helpers and chunked LM head in one.

Token level: ``selective_log_softmax`` / ``selective_log_softmax_and_entropy``
(``harness.targets.trl.token:TRLTokenTarget``); hidden states:
``ChunkedLogProbFunction`` (``harness.targets.trl.hidden``). The capabilities
are the union; each entry point delegates. TRL's Triton kernel alone is
``harness.targets.trl.token:TRLTritonTarget`` (a ``module:attr`` SPEC).
"""

from __future__ import annotations

from harness.targets.protocol import Target
from harness.targets.trl.hidden import TRLHiddenTarget
from harness.targets.trl.token import TRLTokenTarget


class TRLFamilyTarget(Target):
    def __init__(self, root=None):
        self.token = TRLTokenTarget(root)
        self.hidden = TRLHiddenTarget(self.token.root)
        self.name = self.token.name
        self.capabilities = self.token.capabilities | self.hidden.capabilities

    def token_log_probs(self, logits, targets, **options):
        return self.token.token_log_probs(logits, targets, **options)

    def hidden_log_probs(self, hidden, weight, targets, **options):
        return self.hidden.hidden_log_probs(hidden, weight, targets, **options)
