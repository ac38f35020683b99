"""Liger-Kernel's fused linear cross entropy through the hidden-state entry point.

``LigerFusedLinearCrossEntropyFunction`` (``liger_kernel/ops/fused_linear_cross_entropy.py``)
from the installed ``liger-kernel`` package or ``LPH_LIGER_PATH`` (``harness.targets.liger.token``'s
lookup; nothing of it is copied here), called with
``reduction="none"``: ``log_probs = -loss`` per row (its per-token cross
entropy of ``hidden @ weight.T`` is minus the target's log-prob). Since 0.8
its ``reduction="none"`` backward recomputes the chunked logits and folds the
per-token upstream gradient in before ``grad_weight`` is summed.

Where it runs: its kernels are Triton. On a CPU run the adapter sets
``TRITON_INTERPRET=1`` (unless already set) BEFORE importing Liger, so
``triton.jit`` builds the kernels for Triton's CPU interpreter (numpy); the
Python around them (chunk loop, torch matmuls) is Liger's own. With
``LPH_DEVICE=cuda`` nothing is set and the compiled kernels run (not run here:
no GPU). A rank process imports the adapter before Liger, so the variable is
in place there too.

Capabilities: ``hidden`` only, so the checks that need more read UNSUPPORTED:

* ``chunking``: the chunk is Liger's own choice (``chunk_mem_const`` x rows x H
  elements of logits: ``next_power_of_2(ceil(rows / ceil(V / H)))`` rows), not
  the caller's ``chunk_size``; chunk invariance, the memory contract (stated
  in the caller's chunk) and the one_hot regression (which runs under fake
  tensors, where a Triton launch has no data to run on) therefore do not apply;
* ``hidden_tp``: one rank holding the whole vocabulary (Liger's
  vocab-parallel cross entropy takes logits, not hidden states);
* ``entropy`` / ``entropy_gate``: none returned; ``temperature``: none (it has
  ``softcap``, a different transform).

Under the interpreter it declares ``max_hidden_rows`` (``harness.cases.limits``):
the check over a thousand row blocks reads UNSUPPORTED with the bound named.
"""

from __future__ import annotations

import torch

from harness.ranks.device import device_type
from harness.targets.liger.token import IGNORE_INDEX, import_liger
from harness.targets.protocol import Target
from harness.targets.upstream import located


def _function(root):
    try:
        root, module = import_liger("ops.fused_linear_cross_entropy", root)
    except ImportError as exc:
        raise ImportError(f"liger-kernel is not importable: `pip install --no-deps liger-kernel` ({exc})") from exc
    return root, module.LigerFusedLinearCrossEntropyFunction


# Under Triton's CPU interpreter the fused kernel costs about 3.2 ms per row (0.8.5, fp32, H 2, V 4: 3.3 s for
# 1024 rows, 13.0 s for 4096): a thousand 256-row blocks would take a quarter of an hour per call.
INTERPRETER_CASE_LIMITS = {"max_hidden_rows": 16_384}


class LigerTarget(Target):
    capabilities = frozenset({"hidden"})

    def __init__(self, root=None):
        root, self.function = _function(root)
        # the interpreter runs exactly when the device is the CPU (``import_liger``'s own rule)
        self.case_limits = INTERPRETER_CASE_LIMITS if device_type() == "cpu" else None
        self.name = f"liger-kernel-{located.version(root, 'liger-kernel')}"

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        if with_entropy or temperature != 1.0:
            raise RuntimeError(f"{self.name}: no entropy and no temperature (capabilities not declared)")
        distributed = torch.distributed
        if tp_group is not None and distributed.is_initialized() and distributed.get_world_size(tp_group) != 1:
            raise RuntimeError(f"{self.name}: one rank only (capability hidden_tp not declared)")
        loss = self.function.apply(hidden, weight, targets, None, None, IGNORE_INDEX, 0.0, 0.0, "none")[0]
        return -loss, None
