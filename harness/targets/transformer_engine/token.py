"""TransformerEngine's ``parallel_cross_entropy`` (Megatron's ``te`` cross entropy) as a token target.

Root: ``LPH_TE_PATH`` (the gate's ``--no-deps`` install of ``te==X``: the
``transformer-engine`` wheel is pure Python, its CUDA libraries come in other
wheels that are not installed; or a checkout) or the installed package.
Only three of its files run, loaded by path with no ``__init__`` executed (the
package's ``__init__`` loads TE's CUDA extension, which a CPU machine cannot):

* ``transformer_engine/common/triton/cross_entropy.py``: the Triton kernels;
* ``transformer_engine/pytorch/triton/cross_entropy.py``: their launchers
  (``cross_entropy_forward`` / ``cross_entropy_backward``, the TP all-gather of
  per-row statistics through the ``dist_process_group`` argument);
* ``transformer_engine/pytorch/cross_entropy.py``: ``CrossEntropyFunction``
  and ``parallel_cross_entropy``. Its one other import,
  ``transformer_engine.pytorch.jit.no_torch_dynamo`` (used by the
  ``overwrite_input=True`` path only), is a stand-in that disables Dynamo, as
  TE's own does outside ONNX export.

On a CPU run ``TRITON_INTERPRET=1`` is set before the kernels are decorated
(unless ``LPH_DEVICE=cuda``), and the adapter calls ``CrossEntropyFunction``
directly: ``parallel_cross_entropy`` starts with ``_validate_inputs``, which
refuses a tensor that is not CUDA (``inp must be a CUDA tensor``); what it
calls next with ``overwrite_input=False`` is exactly that Function with the
same arguments. So on the CPU TE's input validation (shape, dtype, target
count, label smoothing) is not what the bad-input checks see; with
``LPH_DEVICE=cuda`` the adapter calls ``parallel_cross_entropy`` itself.

Mapping: logits ``[rows, V_local]`` -> TE's ``(B = 1, SQ = rows, V_local)``,
targets ``[rows]`` global ids, ``dist_process_group`` = the TP group (None at
one rank: TE's own single-device form), ``label_smoothing = 0``,
``reduce_loss = False``, ``ignore_idx = -100`` (its default, never a valid id);
``log_probs = -loss`` (TE returns fp32); an entropy request is answered with
``None`` (the suite asks for entropy values only from targets that declare it;
its bad-input rows ask regardless, and must reach TE). Not declared, hence UNSUPPORTED:
``entropy`` (none returned), ``temperature`` (no argument; Megatron divides
the logits before), ``chunking``, ``packed``. ``donation`` is not declared
either: ``overwrite_input=True`` reuses the logits' storage for the gradient
but forbids reading the logits afterwards, which the protocol's donation
(gradient readable in the logits buffer) does not promise.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import types
from functools import cache
from pathlib import Path

import torch

from harness.targets.protocol import Target
from harness.targets.upstream import checkout, located

PATH_VARIABLE = "LPH_TE_PATH"
LAUNCHERS = Path("transformer_engine/pytorch/triton/cross_entropy.py")
FILES = (
    "transformer_engine.common.triton.cross_entropy",
    "transformer_engine.pytorch.triton.cross_entropy",
    "transformer_engine.pytorch.cross_entropy",
)
PACKAGES = (
    "transformer_engine",
    "transformer_engine.common",
    "transformer_engine.common.triton",
    "transformer_engine.pytorch",
    "transformer_engine.pytorch.triton",
)
IGNORE_INDEX = -100


def te_root() -> Path:
    return located.package_root(
        "transformer_engine", PATH_VARIABLE, LAUNCHERS, "`pip install --no-deps transformer-engine==X` (`te==X`)"
    )


def _jit_stand_in() -> types.ModuleType:
    """``transformer_engine.pytorch.jit.no_torch_dynamo``: Dynamo disabled around the function (TE's behaviour)."""
    module = types.ModuleType("transformer_engine.pytorch.jit")

    def no_torch_dynamo(recursive=True, when=None):
        return lambda function: torch._dynamo.disable(function, recursive=recursive)

    module.no_torch_dynamo = no_torch_dynamo
    return module


@cache
def load(root: Path) -> types.ModuleType:
    """TE's ``pytorch/cross_entropy.py`` from ``root`` with its two Triton files (see the module docstring)."""
    if not os.environ.get("LPH_DEVICE", "cpu").startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    modules = checkout.namespace_packages(root, PACKAGES)
    modules["transformer_engine.pytorch.jit"] = _jit_stand_in()
    with checkout.as_sys_modules(modules, "transformer_engine"):
        for name in FILES:
            path = root.joinpath(*name.split(".")).with_suffix(".py")
            if name == FILES[0] and not path.is_file():
                continue  # before 2.10 the kernels lived in the launchers' file (pytorch/triton/cross_entropy.py)
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    return modules["transformer_engine.pytorch.cross_entropy"]


class TECrossEntropyTarget(Target):
    """TE's vocab-parallel cross entropy through its own process-group argument (see the module docstring)."""

    capabilities = frozenset({"token"})
    files_under_test = tuple(f"{name.replace('.', '/')}.py" for name in FILES)  # what a history replay keys by

    def __init__(self, root: Path | None = None):
        self.root = te_root() if root is None else Path(root)
        revision = checkout.revision(self.root) or "unknown"
        self.name = f"transformer-engine-{located.version(self.root, 'transformer-engine', revision)}"
        self.module = load(self.root)
        # the Function's arguments grew: ``ignore_idx`` in 2.4 (#1789), ``is_cg_capturable`` in 2.7 (#1997); an older
        # one is called with the leading ones it takes (``ignore_idx`` is TE's default there, -100)
        self._arity = len(inspect.signature(self.module.CrossEntropyFunction.forward).parameters) - 1  # less ctx

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        if temperature != 1.0 or chunk_size is not None:
            raise RuntimeError(f"{self.name}: no temperature and no chunk (capabilities not declared)")
        batched = logits.unsqueeze(0)
        if logits.is_cuda:
            loss = self.module.parallel_cross_entropy(batched, targets, 0.0, False, tp_group, IGNORE_INDEX)
        else:
            arguments = (batched, targets, 0.0, False, tp_group, IGNORE_INDEX, False)[: self._arity]
            loss = self.module.CrossEntropyFunction.apply(*arguments)
        return -loss.reshape(-1), None
