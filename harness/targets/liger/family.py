"""The ``liger`` family's target (SPEC ``liger==X`` / ``liger=PATH``): Liger's token and hidden-state paths in one.

Token level: ``LigerVocabParallelCEFunction`` (``harness.targets.liger.token``),
the Function Liger ships for Megatron-style vocab-parallel logits, so TP > 1 runs
Liger's own collectives. Hidden states: ``LigerFusedLinearCrossEntropyFunction``
(``harness.targets.liger.hidden``, unchanged). The capabilities are the union
of the two; each entry point delegates. Liger's one-rank
``LigerCrossEntropyFunction`` is ``harness.targets.liger.token:LigerTokenTarget``
(a ``module:attr`` SPEC).
"""

from __future__ import annotations

from harness.targets.liger.hidden import LigerTarget as LigerHiddenTarget
from harness.targets.liger.token import LigerVocabParallelTarget
from harness.targets.protocol import Target


class LigerFamilyTarget(Target):
    def __init__(self, root=None):
        self.token = LigerVocabParallelTarget(root)
        self.hidden = LigerHiddenTarget(root)
        self.name = self.hidden.name
        self.capabilities = self.token.capabilities | self.hidden.capabilities

    def token_log_probs(self, logits, targets, **options):
        return self.token.token_log_probs(logits, targets, **options)

    def hidden_log_probs(self, hidden, weight, targets, **options):
        return self.hidden.hidden_log_probs(hidden, weight, targets, **options)
