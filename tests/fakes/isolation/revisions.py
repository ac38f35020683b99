"""Stand-in "revisions" of a token-level library whose checks must each stay red for their own reason.

Each class is impl/'s token level with one or two defects, as a library's
history would carry them (``tests/test_gate_isolation.py``, loaded as
``tests/fakes/isolation/revisions.py:<Class>``):

* ``WritesAndScales``: negates the logits it is handed IN PLACE, twice
  (the values end as they were, exactly, on every TP shard and in every
  dtype, but the version counter moved: an in-place write all the same) AND
  doubles the gradient of its log-probs (values right, gradient wrong). Its
  inputs-unmutated check and its backward parity must fail, each with its
  own message; its forward parity must pass.
* ``Writes``: the same write, the gradient fixed (a PR fixing only the gradient).
* ``WrongLogProbs``: log-probs off by ``OFFSET`` (forward parity fails on them).
* ``WrongLogProbsAndEntropy``: the same, and the entropy off by ``OFFSET`` too
  (a PR adding a wrong entropy to an already failing check).
* ``RaisesValueError`` / ``RaisesRuntimeError``: every call raises, one
  exception type each (a PR turning one exception into another).
"""

from __future__ import annotations

from harness.targets.impl_target import ImplTarget

OFFSET = 0.05


class _Token(ImplTarget):
    capabilities = frozenset({"token", "entropy", "chunking", "temperature"})


class WritesAndScales(_Token):
    name = "writes-and-scales"
    scale = 2.0

    def token_log_probs(self, logits, targets, **options):
        logits.neg_().neg_()
        log_probs, entropy = super().token_log_probs(logits, targets, **options)
        if self.scale != 1.0:
            log_probs = log_probs + (self.scale - 1.0) * (log_probs - log_probs.detach())
        return log_probs, entropy


class Writes(WritesAndScales):
    name = "writes"
    scale = 1.0


class WrongLogProbs(_Token):
    name = "wrong-log-probs"
    entropy_offset = 0.0

    def token_log_probs(self, logits, targets, **options):
        log_probs, entropy = super().token_log_probs(logits, targets, **options)
        if entropy is not None and self.entropy_offset:
            entropy = entropy + self.entropy_offset
        return log_probs + OFFSET, entropy


class WrongLogProbsAndEntropy(WrongLogProbs):
    name = "wrong-log-probs-and-entropy"
    entropy_offset = OFFSET


class RaisesValueError(_Token):
    name = "raises-value-error"
    error = ValueError

    def token_log_probs(self, logits, targets, **options):
        raise self.error("the vocabulary shard is not where it was expected")


class RaisesRuntimeError(RaisesValueError):
    name = "raises-runtime-error"
    error = RuntimeError
