"""TransformerEngine's vocab-parallel cross entropy (NVIDIA/TransformerEngine): ``te==X`` or ``te=PATH``.

The generated page (docs/records/families/te.md) says what the entry calls and translates; this says why. The
``transformer-engine`` wheel is pure Python (its CUDA libraries are other wheels, not installed). No
``__init__`` runs (TE's loads its CUDA extension): what runs is ``pytorch/cross_entropy.py``, its launchers
``pytorch/triton/cross_entropy.py`` (the TP all-gather of per-row statistics through ``dist_process_group``)
and the Triton kernels they import (``common/triton/cross_entropy.py``; before 2.10 inside the launchers'
file), on a CPU under Triton's interpreter. Its ``pytorch.jit`` module imports TE's CUDA utilities, so
``no_torch_dynamo`` (used by the ``overwrite_input=True`` path only) is a placeholder disabling Dynamo, as TE's
own does outside ONNX export.
"""

from __future__ import annotations

import types

import torch

from harness.targets.upstream import calls
from harness.targets.upstream.family import Entry, Family, Module, Symbol, parameters
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.placeholders import Placeholder

IGNORE_INDEX = -100


def _jit(name: str) -> types.ModuleType:
    """``transformer_engine.pytorch.jit`` as far as the cross entropy reads it: Dynamo disabled around a function."""
    module = types.ModuleType(name)

    def no_torch_dynamo(recursive=True, when=None):
        return lambda function: torch._dynamo.disable(function, recursive=recursive)

    module.no_torch_dynamo = no_torch_dynamo
    return module


def token(up, call: calls.TokenCall):
    """``parallel_cross_entropy`` on ``(B = 1, SQ = rows, V_local)``, ``label_smoothing = 0``,
    ``reduce_loss = False``, ``ignore_idx = -100`` (never a valid id): ``log_probs = -loss``. Its
    ``_validate_inputs`` refuses a tensor that is not CUDA, so on CPU tensors the entry calls what it calls next,
    ``CrossEntropyFunction`` with ``overwrite_input=False`` and the leading arguments it takes (``ignore_idx``
    arrived in 2.4): TE's input validation is then not what the CPU's bad-input rows see."""
    batched = call.logits.unsqueeze(0)
    arguments = (batched, call.targets, 0.0, False, call.tp_group, IGNORE_INDEX)
    if call.logits.is_cuda:
        loss = up.parallel_cross_entropy(*arguments)
    else:
        taken = len(parameters(up.CrossEntropyFunction.forward)) - 1  # less ctx
        loss = up.CrossEntropyFunction.apply(*(*arguments, False)[:taken])
    return -loss.reshape(-1), None


TE = Family(
    name="te",
    locate=Locate(
        "transformer_engine",
        "transformer_engine/pytorch/triton/cross_entropy.py",
        "LPH_TE_PATH",
        pypi="transformer-engine",
    ),
    modules={"cross_entropy": Module(("transformer_engine.pytorch.cross_entropy",))},
    symbols={name: Symbol("cross_entropy", (name,)) for name in ("CrossEntropyFunction", "parallel_cross_entropy")},
    entries=(
        Entry("token_log_probs", ("CrossEntropyFunction", "parallel_cross_entropy"), token, frozenset({"token"})),
    ),
    placeholders=(
        Placeholder(
            "transformer_engine.pytorch.jit",
            "TE's jit module imports its CUDA utilities; the cross entropy reads only no_torch_dynamo",
            _jit,
            replaces=True,
        ),
    ),
    not_declared={
        "entropy": "TE returns the loss alone",
        "temperature": "no such argument: Megatron divides the logits before",
        "chunking": "no chunk argument",
        "packed": "TE's cross entropy is token level",
        "donation": "overwrite_input=True reuses the logits' storage for the gradient but forbids reading the logits "
        "afterwards, which the protocol's donation (the gradient readable in the logits buffer) does not promise",
    },
    expectations=("te.toml",),
    triton=True,
)
