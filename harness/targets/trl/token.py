"""TRL's token-level helpers through the token entry point.

What runs is TRL's own code (``harness.targets.trl.loading``):

* ``TRLTokenTarget``: ``selective_log_softmax`` and
  ``selective_log_softmax_and_entropy`` from ``trl/trainer/utils.py``, what
  TRL's trainers call on ``[..., V]`` logits. On CPU tensors they take their
  torch path (``_supports_trl_loss_kernel`` asks for a CUDA/XPU device): a
  per-row ``logsumexp`` (fp32/fp64) or per-row ``log_softmax`` (bf16/fp16),
  and ``entropy_from_logits`` in row chunks of 128. With ``LPH_DEVICE=cuda``
  the same functions dispatch to the Triton kernel below (not run here).
* ``TRLTritonTarget``: ``selective_log_softmax_and_entropy`` from
  ``trl/kernels/logprob_entropy.py``, the Triton kernel TRL dispatches to on
  CUDA, run on CPU tensors under Triton's interpreter (``loading`` sets
  ``TRITON_INTERPRET=1`` before the kernel is decorated, unless ``LPH_DEVICE=cuda``).

Mapping (docs/targets.md): TRL's ``index`` is the targets (already shifted by
the caller, as the protocol's are); ``temperature`` is TRL's argument (it
divides the logits); entropy is TRL's ``-sum p log p`` (positive, as the
protocol's). ``entropy_grad=False`` is TRL's ``entropy_requires_grad=False``
(the utils path computes it under ``no_grad``). TRL does not shard the
vocabulary: at TP > 1 the adapter gathers the shards
(``harness.targets.upstream.whole_vocab``) and TRL runs on the whole
vocabulary on every rank.

Releases before 1.14 (a release replay) have no
``selective_log_softmax_and_entropy``: there the adapter composes what their
GRPO trainer does with the two helpers (logits divided by the temperature,
``selective_log_softmax``, then ``entropy_from_logits``, under ``no_grad``
unless the entropy bonus needs its gradient). That gate is the adapter's
copy of the trainer's branch, not a TRL function's, so ``entropy_gate`` is
not declared there; before 0.20 (no ``entropy_from_logits``) neither is
``entropy``.

Not declared, hence UNSUPPORTED: ``chunking`` (``entropy_from_logits``'s row
chunk is fixed at its default by ``selective_log_softmax_and_entropy``, and
``selective_log_softmax`` has none), ``packed`` (TRL's trainers pad to
``[B, T]`` and mask; the protocol's packed layouts are Megatron's) and the rest.
``TRLTritonTarget`` also lacks ``entropy_gate`` (the kernel always builds the
entropy's graph; the detach is the utils wrapper's).
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.targets.protocol import Target
from harness.targets.trl import loading
from harness.targets.upstream.whole_vocab import gather_vocabulary


class TRLTokenTarget(Target):
    """``selective_log_softmax`` / ``selective_log_softmax_and_entropy`` (see the module docstring)."""

    capabilities = frozenset({"token", "entropy", "entropy_gate", "temperature"})

    def __init__(self, root=None):
        self.root = loading.trl_root() if root is None else Path(root)
        self.name = f"trl-{loading.trl_version(self.root)}"
        self.functions = loading.utils_functions(self.root)
        if self.functions.selective_log_softmax_and_entropy is None:  # TRL < 1.14 (see the module docstring)
            has_entropy = self.functions.entropy_from_logits is not None
            self.capabilities = frozenset({"token", "temperature", *(("entropy",) if has_entropy else ())})

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        if chunk_size is not None:
            raise RuntimeError(f"{self.name}: TRL's helpers take no chunk (capability not declared)")
        whole = gather_vocabulary(logits, tp_group)
        if self.functions.selective_log_softmax_and_entropy is None:
            return self._composed(whole, targets, with_entropy=with_entropy, entropy_grad=entropy_grad, t=temperature)
        if not with_entropy:
            return self.functions.selective_log_softmax(whole, targets, temperature=temperature), None
        return self.functions.selective_log_softmax_and_entropy(
            whole, targets, entropy_requires_grad=entropy_grad, temperature=temperature
        )

    def _composed(self, whole, targets, *, with_entropy, entropy_grad, t):
        """TRL < 1.14: the GRPO trainer's composition of the two helpers (the module docstring)."""
        if with_entropy and "entropy" not in self.capabilities:
            raise RuntimeError(f"{self.name}: no entropy_from_logits in this release (capability not declared)")
        scaled = whole / t
        log_probs = self.functions.selective_log_softmax(scaled, targets)
        if not with_entropy:
            return log_probs, None
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            return log_probs, self.functions.entropy_from_logits(scaled)


class TRLTritonTarget(Target):
    """TRL's ``logprob_entropy`` Triton kernel (Triton's CPU interpreter on a CPU run; see the module docstring)."""

    capabilities = frozenset({"token", "entropy", "temperature"})

    def __init__(self, root=None):
        self.root = loading.trl_root() if root is None else Path(root)
        self.name = f"trl-{loading.trl_version(self.root)}-triton"
        fused = loading.kernels(self.root).fused
        if fused is None:
            raise ModuleNotFoundError(f"{self.name}: triton is not importable (TRL's kernel needs it)")
        self.function = fused.selective_log_softmax_and_entropy

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        if chunk_size is not None or (with_entropy and not entropy_grad):
            raise RuntimeError(f"{self.name}: no chunk and no entropy gate (capabilities not declared)")
        log_probs, entropy = self.function(gather_vocabulary(logits, tp_group), targets, temperature=temperature)
        return log_probs, entropy if with_entropy else None
