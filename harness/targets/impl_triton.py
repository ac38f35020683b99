"""``impl-triton``: ``impl/`` with its token-level passes on the Triton kernels (``impl.triton``).

On CUDA tensors the kernels are compiled for the GPU. On the CPU (the CI
machines) they run under Triton's interpreter: the target sets
``TRITON_INTERPRET=1`` when it is loaded, before anything imports
``impl.triton.kernels`` (Triton reads it when the kernels are defined), and
rank processes, which load the target themselves and inherit the variable,
do the same. Two declared differences from ``impl``, both reported, never
hidden:

* no ``hidden``/``hidden_tp``: the hidden-state path (``impl.hidden_states``)
  has no Triton backend, so its checks read UNSUPPORTED for this target;
  likewise no ``sampling*``: the kept-set path (``impl.sampling``) works on
  the kept entries only and has no Triton kernel;
* under the interpreter, ``case_limits`` (``harness.cases.limits``): generated
  cases have at most 3 samples of up to 24 tokens and 48 vocabulary columns
  per TP rank (the interpreter costs milliseconds per kernel op); explicit
  examples, real vocabularies included, still run in full.
"""

from __future__ import annotations

import os
import sys

from harness.ranks.device import device_type
from harness.targets.impl_target import ImplTarget
from harness.targets.protocol import CAPABILITIES, SAMPLING_CAPABILITIES
from impl.backend import TRITON, interpreting

INTERPRETER_CASE_LIMITS = {"max_samples": 3, "max_length": 24, "max_vocab_local": 48}


def _interpret_on_cpu() -> bool:
    """Switch Triton to its interpreter for a CPU run; True when the kernels will be interpreted."""
    if device_type() != "cpu":
        return interpreting()
    if not interpreting():
        if "impl.triton.kernels" in sys.modules:
            raise RuntimeError(
                "impl-triton on CPU needs TRITON_INTERPRET=1 before impl.triton.kernels is imported, and this "
                "process already imported it without: set TRITON_INTERPRET=1 in the environment"
            )
        os.environ["TRITON_INTERPRET"] = "1"
    return True


class ImplTritonTarget(ImplTarget):
    """``impl`` forced onto its Triton backend (see the module docstring)."""

    name = "impl-triton"
    # The kernels' online row sums follow their tile order within a shard: not the same bits across TP degrees.
    capabilities = CAPABILITIES - {"hidden", "hidden_tp", "topology_invariant"} - SAMPLING_CAPABILITIES
    backend = TRITON
    traces_on_meta = False  # the forced Triton backend refuses meta tensors (impl.backend.resolve_backend)

    def __init__(self):
        self.case_limits = INTERPRETER_CASE_LIMITS if _interpret_on_cpu() else None
