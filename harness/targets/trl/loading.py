"""TRL's own files, loaded without TRL's package imports (transformers, accelerate, datasets, pandas, ...).

Root: ``LPH_TRL_PATH`` (the gate's ``--no-deps`` install of ``trl==X``, or a
checkout) or the installed ``trl``. Nothing of TRL is copied here.

* ``trl/kernels/chunked_logprob.py`` and ``trl/kernels/logprob_entropy.py``
  run as modules of a private package ``lph_trl`` (namespace packages: TRL's
  ``__init__`` files, which import transformers, never run). Their one
  import-time dependency outside torch/triton/packaging is
  ``transformers.utils.is_triton_available``, presented during the load as
  ``importlib.util.find_spec("triton") is not None`` (what transformers
  checks). ``chunked_logprob``'s backward imports
  ``maybe_gather_lm_head_ctx`` from ``..trainer.utils``: a stand-in module
  holds TRL's own function with its DeepSpeed check answered "ZeRO-3 off"
  (its documented ``nullcontext()`` branch: the harness has no DeepSpeed).
* ``trl/trainer/utils.py`` imports half the Hugging Face stack, so only the
  functions under test are taken from it: their ``def`` statements are parsed
  out of the file (``ast``) and executed verbatim in a namespace holding what
  they reference (``torch``, ``F``, ``is_triton_available`` and
  ``_fused_logprob_entropy``, the latter bound as TRL binds it: the
  ``logprob_entropy`` kernel when Triton is importable). A version whose file
  lacks ``selective_log_softmax`` is refused with its name.

Older releases (a release replay, ``docs/archive/history-trl.md``) have less: no
``trl/kernels/`` before 1.15 (no chunked LM head: ``kernels(root).chunked``
is None), no ``selective_log_softmax_and_entropy`` /
``_supports_trl_loss_kernel`` before 1.14, no ``entropy_from_logits`` before
0.20; a helper a release lacks is None here, and the adapters declare only
what the release has.

The kernels are decorated when loaded, so ``TRITON_INTERPRET=1`` is set first
(unless ``LPH_DEVICE=cuda``): on a CPU run ``logprob_entropy`` runs under
Triton's interpreter, and ``chunked_logprob`` takes its torch tiles anyway.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import sys
import types
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F

from harness.targets.upstream import checkout, located

PATH_VARIABLE = "LPH_TRL_PATH"
CHUNKED = Path("trl/kernels/chunked_logprob.py")
FUSED = Path("trl/kernels/logprob_entropy.py")
UTILS = Path("trl/trainer/utils.py")
PRIVATE = "lph_trl"
UTILS_FUNCTIONS = (
    "_supports_trl_loss_kernel",
    "selective_log_softmax",
    "entropy_from_logits",
    "selective_log_softmax_and_entropy",
    "maybe_gather_lm_head_ctx",
)
REQUIRED = ("selective_log_softmax",)  # every release the adapters load has it; the others arrived later


def trl_root() -> Path:
    return located.package_root(
        "trl", PATH_VARIABLE, UTILS, "`pip install --no-deps trl==X` (`nox -s upstream -- trl==X`)"
    )


def trl_version(root: Path) -> str:
    return located.version(root, "trl")


def is_triton_available() -> bool:
    """What ``transformers.utils.is_triton_available`` answers on a machine: whether triton imports."""
    return importlib.util.find_spec("triton") is not None


def _definitions(path: Path, names, optional=()) -> dict:
    """The top-level ``def``s and assignments named ``names`` in ``path``, as source-ordered AST nodes.

    A name in ``optional`` the file lacks is left out; any other missing name is an error naming it.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    found[target.id] = node
    missing = [name for name in names if name not in found and name not in optional]
    if missing:
        raise AttributeError(f"{path} defines no {', '.join(missing)}: this TRL version is not supported")
    return found


def _run_definitions(path: Path, names, namespace: dict, optional=()) -> dict:
    nodes = _definitions(path, names, optional)
    module = ast.Module(body=list(nodes.values()), type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # TRL's own statements, verbatim
    return namespace


@contextlib.contextmanager
def _transformers_stand_in():
    """``transformers.utils.is_triton_available`` (and the DeepSpeed probe) while TRL's files load and run."""
    top = types.ModuleType("transformers")
    utils = types.ModuleType("transformers.utils")
    utils.is_triton_available = is_triton_available
    integrations = types.ModuleType("transformers.integrations")
    deepspeed = types.ModuleType("transformers.integrations.deepspeed")
    deepspeed.is_deepspeed_zero3_enabled = lambda: False  # the harness runs no DeepSpeed
    top.utils, top.integrations, integrations.deepspeed = utils, integrations, deepspeed
    modules = {
        "transformers": top,
        "transformers.utils": utils,
        "transformers.integrations": integrations,
        "transformers.integrations.deepspeed": deepspeed,
    }
    with checkout.as_sys_modules(modules, "transformers"):
        yield


@cache
def kernels(root: Path) -> types.SimpleNamespace:
    """``chunked_logprob`` (and ``logprob_entropy`` where Triton imports) from ``root``, under ``lph_trl``."""
    for name in (PRIVATE, f"{PRIVATE}.kernels", f"{PRIVATE}.trainer"):
        sub = name.partition(".")[2]
        sys.modules[name] = checkout.namespace_package(name, root / "trl" / sub if sub else root / "trl")
    utils = types.ModuleType(f"{PRIVATE}.trainer.utils")
    if (root / CHUNKED).is_file():  # the helper only the chunked LM head's backward imports
        namespace = _run_definitions(
            root / UTILS, ("maybe_gather_lm_head_ctx",), {"nullcontext": contextlib.nullcontext}
        )
        utils.maybe_gather_lm_head_ctx = _with_stand_in(namespace["maybe_gather_lm_head_ctx"])
    sys.modules[utils.__name__] = utils
    if not os.environ.get("LPH_DEVICE", "cpu").startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read by triton.jit when the kernels are decorated
    loaded = {}
    with _transformers_stand_in():
        for key, path in (("chunked", CHUNKED), ("fused", FUSED)):
            if not (root / path).is_file() or (key == "fused" and not is_triton_available()):
                loaded[key] = None
                continue
            name = f"{PRIVATE}.kernels.{path.stem}"
            spec = importlib.util.spec_from_file_location(name, root / path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            loaded[key] = module
    return types.SimpleNamespace(**loaded, utils=utils)


def _with_stand_in(function):
    """TRL's ``maybe_gather_lm_head_ctx`` run with the transformers stand-in present (it imports at call time)."""

    def call(*params):
        with _transformers_stand_in():
            return function(*params)

    return call


@cache
def utils_functions(root: Path) -> types.SimpleNamespace:
    """TRL's token-level helpers from ``trl/trainer/utils.py`` (see the module docstring)."""
    fused = kernels(root).fused
    namespace = {
        "torch": torch,
        "F": F,
        "is_triton_available": is_triton_available,
        "nullcontext": contextlib.nullcontext,
        "_fused_logprob_entropy": None if fused is None else fused.selective_log_softmax_and_entropy,
    }
    wanted = UTILS_FUNCTIONS[:-1]
    _run_definitions(root / UTILS, wanted, namespace, optional=tuple(n for n in wanted if n not in REQUIRED))
    return types.SimpleNamespace(**{name: namespace.get(name) for name in wanted})


def chunk_default(root: Path) -> int:
    """``_CHUNKED_LOGPROB_CHUNK_SIZE``: the vocabulary width of a tile TRL's fused forward passes to the Function."""
    namespace = _run_definitions(root / UTILS, ("_CHUNKED_LOGPROB_CHUNK_SIZE",), {})
    return int(namespace["_CHUNKED_LOGPROB_CHUNK_SIZE"])
