"""Megatron-core's own ``tensor_parallel.vocab_parallel_cross_entropy``, from a Megatron-LM checkout, for ms-swift.

ms-swift's GRPO log-probs are ``-tensor_parallel.vocab_parallel_cross_entropy``
(Megatron's, not ms-swift's code), so the harness runs Megatron's file rather
than a stand-in written from its signature: ``LPH_MEGATRON_PATH`` names a
Megatron-LM checkout (or an unpacked ``megatron-core`` wheel) and
``megatron/core/tensor_parallel/cross_entropy.py`` is executed from it. Its
imports are satisfied without executing the rest of Megatron (whose
``megatron.core.utils`` pulls in CUDA-only packages):

* ``megatron.core.parallel_state``: the harness's stand-in
  (``harness.targets.upstream.megatron_stand_in``);
* ``megatron.core.utils.get_pg_rank`` / ``get_pg_size`` and
  ``.utils.VocabUtility`` (with ``divide``/``ensure_divisibility``, what it
  calls): parsed out of Megatron's own ``megatron/core/utils.py`` and
  ``tensor_parallel/utils.py`` (``ast``) and executed verbatim.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from pathlib import Path

import torch

from harness.targets.upstream import checkout, megatron_stand_in

PATH_VARIABLE = "LPH_MEGATRON_PATH"
CROSS_ENTROPY = Path("megatron/core/tensor_parallel/cross_entropy.py")
CORE_UTILS = Path("megatron/core/utils.py")
TP_UTILS = Path("megatron/core/tensor_parallel/utils.py")
MODULE = "megatron.core.tensor_parallel.cross_entropy"


def megatron_root() -> Path:
    value = os.environ.get(PATH_VARIABLE)
    if not value:
        raise FileNotFoundError(
            f"{PATH_VARIABLE} is not set: ms-swift's log-probs run Megatron-core's vocab_parallel_cross_entropy; "
            "set it to a Megatron-LM checkout (git clone https://github.com/NVIDIA/Megatron-LM)"
        )
    root = Path(value).expanduser().resolve()
    if not (root / CROSS_ENTROPY).is_file():
        raise FileNotFoundError(f"{PATH_VARIABLE}={value}: no {CROSS_ENTROPY} under it")
    return root


def _take(path: Path, names, namespace: dict) -> None:
    """Execute the top-level ``def``/``class`` statements ``names`` of ``path`` in ``namespace`` (verbatim)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in names]
    missing = set(names) - {n.name for n in nodes}
    if missing:
        raise AttributeError(f"{path} defines no {', '.join(sorted(missing))}: this Megatron version is not supported")
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), namespace)


def tensor_parallel(root: Path) -> types.ModuleType:
    """``megatron.core.tensor_parallel`` holding Megatron's ``vocab_parallel_cross_entropy`` (registered once)."""
    megatron_stand_in.install()
    existing = sys.modules.get("megatron.core.tensor_parallel")
    if existing is not None and hasattr(existing, "vocab_parallel_cross_entropy"):
        return existing
    core_utils = types.ModuleType("megatron.core.utils")
    _take(root / CORE_UTILS, ("get_pg_rank", "get_pg_size", "ensure_divisibility", "divide"), core_utils.__dict__)
    core_utils.torch = torch
    tp_utils = types.ModuleType("megatron.core.tensor_parallel.utils")
    tp_utils.__dict__.update(divide=core_utils.divide, Sequence=Sequence)
    _take(root / TP_UTILS, ("VocabUtility",), tp_utils.__dict__)
    package = checkout.namespace_package("megatron.core.tensor_parallel", root / CROSS_ENTROPY.parent)
    sys.modules["megatron.core.utils"] = core_utils
    sys.modules["megatron.core.tensor_parallel"] = package
    sys.modules["megatron.core.tensor_parallel.utils"] = tp_utils
    spec = importlib.util.spec_from_file_location(MODULE, root / CROSS_ENTROPY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    spec.loader.exec_module(module)
    package.vocab_parallel_cross_entropy = module.vocab_parallel_cross_entropy
    sys.modules["megatron.core"].tensor_parallel = package
    sys.modules["megatron.core"].utils = core_utils
    return package
