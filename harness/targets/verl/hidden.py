"""verl's fused LM-head log-prob/entropy paths at the hidden-state level (capability ``hidden``).

verl's FSDP models (``verl/models/transformers/dense_common.py`` and the VLM
variants) compute log-probs and entropy from the hidden states and the LM head
without materialising every logit, through one of two kernels:

* ``VerlFusedTorchTarget``: ``FusedLinearForPPOFunction`` of
  ``verl/utils/experimental/torch_functional.py`` (``FusedLinearForPPO``'s
  ``impl_backend="torch"``, verl's default): per chunk of rows, fp32 logits
  ``hidden @ W.T / t``, log-softmax and entropy, and a backward that recomputes
  the chunk. It takes ``hidden [T, H]``, the whole head ``[V, H]``, targets
  ``[T]``, a float temperature and an integer chunk (the module's ``chunk_size``,
  512 in verl; the harness's ``chunk_size`` as given, 0 and negatives
  included, or all rows as one chunk when None). It returns fp32 log-probs and the entropy in the logits' dtype, both
  always: with ``with_entropy=False`` the entropy is dropped (autograd then
  hands its backward ``None``, which it accepts), with ``entropy_grad=False`` it
  is detached (the caller's choice in verl). Capabilities ``hidden``,
  ``entropy``, ``chunking``, ``temperature``: one rank (no TP: it takes the whole
  head). verl picks flash-attn's Triton cross entropy for the log-probs when
  ``flash_attn`` is importable; the harness does not install it, so the
  torch fallback of the same file runs.
* verl's Triton kernels (``verl/utils/kernel/linear_cross_entropy.py`` /
  ``kernels.py``, the ``triton`` backend, with TP) are not declared on a CPU
  run: ``efficient_entropy_forward`` asserts ``hidden.is_cuda`` and uses CUDA
  streams, so Triton's CPU interpreter never reaches them (the same kernel as
  SkyRL's ``FusedLinearLogprobTriton``, docs/targets.md).
"""

from __future__ import annotations

import os

from harness.targets.protocol import Target
from harness.targets.verl import source


class VerlFusedTorchTarget(Target):
    """verl's ``FusedLinearForPPOFunction`` (torch backend) from ``LPH_VERL_PATH`` or the installed verl."""

    files_under_test = (source.FUSED_TORCH,)  # what a history replay keys revisions by (with the family's)

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = source.verl_root(root)
        self.name = f"{source.version(self.root)}-fused-torch"
        self.module = source.fused_torch(self.root)
        if self.module is None:
            raise ModuleNotFoundError(f"{self.root}: no {source.FUSED_TORCH} with FusedLinearForPPOFunction")
        self.capabilities = frozenset({"hidden", "entropy", "chunking", "temperature"})

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        if tp_group is not None:
            raise ValueError(f"{self.name}: tp_group must be None (verl's fused torch path takes the whole head)")
        rows = hidden.shape[0]
        chunk = max(rows, 1) if chunk_size is None else chunk_size  # 0 and negatives reach verl as given
        log_probs, entropy = self.module.FusedLinearForPPOFunction.apply(
            hidden, weight, targets.to(hidden.device), float(temperature), chunk
        )
        if not with_entropy:
            return log_probs, None
        return log_probs, (entropy if entropy_grad else entropy.detach())
