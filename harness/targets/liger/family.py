"""The ``liger`` family's target (SPEC ``liger==X`` / ``liger=PATH``): Liger's token and hidden-state paths in one.

Token level: ``LigerVocabParallelCEFunction`` (``harness.targets.liger.token``),
the Function Liger ships for Megatron-style vocab-parallel logits, so TP > 1 runs
Liger's own collectives. Hidden states: ``LigerFusedLinearCrossEntropyFunction``
(``harness.targets.liger.hidden``, unchanged). Capabilities:
``harness.targets.upstream.combined``. Liger's one-rank
``LigerCrossEntropyFunction`` is ``harness.targets.liger.token:LigerTokenTarget``
(a ``module:attr`` SPEC).
"""

from __future__ import annotations

from harness.targets.liger.hidden import LigerTarget as LigerHiddenTarget
from harness.targets.liger.token import LigerVocabParallelTarget
from harness.targets.upstream.combined import TokenAndHidden


class LigerFamilyTarget(TokenAndHidden):
    # what a history replay keys revisions by: the two Functions' files, the cross-entropy kernel and the helpers they
    # import (paths in Liger's checkout, whose package is under src/); the package __init__ files are not keyed
    files_under_test = (
        "src/liger_kernel/ops/vocab_parallel_cross_entropy.py",
        "src/liger_kernel/ops/fused_linear_cross_entropy.py",
        "src/liger_kernel/ops/cross_entropy.py",
        "src/liger_kernel/ops/utils.py",
        "src/liger_kernel/utils.py",
    )

    def __init__(self, root=None):
        hidden = LigerHiddenTarget(root)
        super().__init__(LigerVocabParallelTarget(root), hidden, hidden.name)
