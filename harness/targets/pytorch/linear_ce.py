"""torch's own ``torch.nn.functional.linear_cross_entropy`` (torch >= 2.13) through the hidden-state entry point.

``log_probs = -linear_cross_entropy(hidden, weight, targets, reduction='none')``
(the per-token cross-entropy of the linear layer's logits is minus the
target's log-prob). Two targets, both loaded from the installed torch, nothing copied:

* ``TorchLinearCETarget``: ``options=None``, torch's reference path
  (``linear`` then ``cross_entropy``: full logits);
* ``TorchLinearCEChunked``: ``options=LinearCrossEntropyOptions(batch_chunk_size=chunk)``,
  the chunked path that never materialises the logits (its docstring: it
  precomputes gradients in forward and mutates them in backward, outside
  the usual autograd contract; the suite's second-backward and
  inputs-unmutated checks are what would catch that going wrong).

What they do not have, declared by their capabilities so the checks report
UNSUPPORTED: entropy (and its gate), temperature (callers would have to
scale ``hidden`` themselves: not the op's contract), and tensor parallelism
(no ``hidden_tp``: one rank holding the whole vocabulary). ``chunking`` is
declared for the chunked path only (``chunk_size`` -> ``batch_chunk_size``).
"""

from __future__ import annotations

import torch

from harness.targets.protocol import Target


def _linear_cross_entropy():
    function = getattr(torch.nn.functional, "linear_cross_entropy", None)
    if function is None:
        raise RuntimeError(f"torch {torch.__version__} has no torch.nn.functional.linear_cross_entropy (needs >= 2.13)")
    return function


def _one_rank(tp_group) -> None:
    distributed = torch.distributed
    if tp_group is not None and distributed.is_initialized() and distributed.get_world_size(tp_group) != 1:
        raise RuntimeError("torch's linear_cross_entropy has no tensor parallelism: tp_group must be one rank")


class TorchLinearCETarget(Target):
    name = "torch-linear-ce-reference"
    capabilities = frozenset({"hidden"})

    def _options(self, chunk_size):
        return None

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        if with_entropy:
            raise RuntimeError("torch's linear_cross_entropy returns no entropy (capability 'entropy' not declared)")
        if temperature != 1.0:
            raise RuntimeError("torch's linear_cross_entropy has no temperature (capability not declared)")
        _one_rank(tp_group)
        loss = _linear_cross_entropy()(
            hidden, weight, targets, reduction="none", ignore_index=-100, options=self._options(chunk_size)
        )
        return -loss, None


class TorchLinearCEChunked(TorchLinearCETarget):
    name = "torch-linear-ce-chunked"
    capabilities = frozenset({"hidden", "chunking"})

    def _options(self, chunk_size):
        return torch.nn.LinearCrossEntropyOptions(batch_chunk_size=chunk_size)
