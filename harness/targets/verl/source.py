"""Finding a verl source tree and executing the files under test from it (nothing of verl is copied).

The tree is ``LPH_VERL_PATH`` (a checkout's root, or a ``pip install --no-deps
--target DIR verl==X`` directory), else the installed ``verl`` package's parent.
verl's package ``__init__`` files import the whole trainer (Ray, transformers,
tensordict, Hydra configs), so only the files under test run, each as a
private module (``lph_upstream_verl_*``), their imports answered by:

* ``megatron.core.parallel_state`` (``mpu``): the job's TP group
  (``harness/targets/upstream/megatron_stand_in.py``);
* ``megatron.core.tensor_parallel.vocab_parallel_cross_entropy``: Megatron's
  cross entropy, stood in (``harness/targets/upstream/megatron_cross_entropy.py``);
* for ``models/mcore/util.py`` (the thd packing, ``harness/targets/verl/packed.py``):
  ``megatron.core.packed_seq_params.PackedSeqParams`` as a record of its
  keyword arguments, ``verl.utils.device`` (no NPU) and ``verl.utils.model``
  (a placeholder: its output class is used by functions the adapter never
  calls); its module logger gets the ``warning_once`` that importing
  transformers adds to ``logging.Logger`` in a verl process;
* for ``core_algos.py``: verl's own ``torch_functional.py`` (its masked sums),
  with its import-only third-party packages (tensordict, transformers,
  omegaconf, numpy when absent) as placeholders, and the three verl names it
  imports for other functions (``verl.trainer.config.AlgoConfig``,
  ``verl.workers.config.ActorConfig``, ``verl.utils.as_torch_index`` /
  ``group_mean_std``, ``verl.utils.device``) as placeholders that refuse to be
  used; the policy loss reads its settings from a strict settings object.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path

from harness.targets.upstream import checkout, megatron_cross_entropy, megatron_stand_in
from harness.targets.upstream.placeholders import Placeholder, provided, refusing

PATH_VARIABLE = "LPH_VERL_PATH"
TENSOR_PARALLEL = "verl/utils/megatron/tensor_parallel.py"
CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
TORCH_FUNCTIONAL = "verl/utils/torch_functional.py"
FUSED_TORCH = "verl/utils/experimental/torch_functional.py"
MCORE_UTIL = "verl/models/mcore/util.py"
# The files VerlTarget executes (a history replay keys revisions by their blob ids); the hidden-state target
# (hidden.py) executes FUSED_TORCH.
FILES_UNDER_TEST = (TENSOR_PARALLEL, CORE_ALGOS, TORCH_FUNCTIONAL, MCORE_UTIL)
# Third-party packages the loaded files import at module level for functions the adapters never call.
IMPORT_ONLY = ("tensordict", "transformers", "omegaconf", "numpy", "codetiming", "hydra")


def verl_root(root: str | os.PathLike | None = None) -> Path:
    """The tree holding the ``verl`` package: ``root``, ``LPH_VERL_PATH`` or the installed package's parent."""
    where = root if root is not None else os.environ.get(PATH_VARIABLE)
    if where:
        path = Path(where).expanduser().resolve()
        if not (path / TENSOR_PARALLEL).is_file():
            raise FileNotFoundError(f"{PATH_VARIABLE}={where}: no {TENSOR_PARALLEL} under {path}")
        return path
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"verl is not installed: `pip install --no-deps verl==X` (or `nox -s upstream -- verl==X`), or set "
            f"{PATH_VARIABLE} to a checkout"
        )
    path = Path(list(spec.submodule_search_locations)[0]).parent
    if not (path / TENSOR_PARALLEL).is_file():
        raise FileNotFoundError(f"the installed verl package has no {TENSOR_PARALLEL}")
    return path


def version(root: Path) -> str:
    """``verl-<version>`` for an installed tree (its dist-info), ``verl@<commit>`` for a checkout, else ``verl``."""
    from importlib.metadata import distributions

    for dist_info in distributions(path=[str(root)]):
        if dist_info.metadata["Name"] == "verl":
            return f"verl-{dist_info.version}"
    rev = checkout.revision(root)
    return f"verl@{rev}" if rev else "verl"


def _execute(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


_CACHE: dict[tuple[Path, str], types.ModuleType | None] = {}


def _cached(root: Path, key: str, load):
    if (root, key) not in _CACHE:
        _CACHE[(root, key)] = load()
    return _CACHE[(root, key)]


def tensor_parallel(root: Path) -> types.ModuleType:
    """``verl/utils/megatron/tensor_parallel.py`` with Megatron's mpu and cross entropy stood in."""

    def load():
        megatron_cross_entropy.install()
        module = _execute("lph_upstream_verl_tensor_parallel", root / TENSOR_PARALLEL)
        for name in ("vocab_parallel_entropy", "vocab_parallel_log_probs_from_logits"):
            if not hasattr(module, name):
                raise AttributeError(f"{root / TENSOR_PARALLEL} defines no {name}: this verl version is not supported")
        return module

    return _cached(root, "tensor_parallel", load)


def fused_torch(root: Path) -> types.ModuleType | None:
    """``verl/utils/experimental/torch_functional.py`` (the torch fused LM-head path), None where absent."""

    def load():
        if not (root / FUSED_TORCH).is_file():
            return None
        module = _execute("lph_upstream_verl_fused_torch", root / FUSED_TORCH)
        return module if hasattr(module, "FusedLinearForPPOFunction") else None

    return _cached(root, "fused_torch", load)


_refused = refusing  # a verl name imported for functions the adapter never calls: a class that refuses to be used


def _placeholder_module(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__doc__ = "harness stand-in (harness/targets/verl/source.py)"
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


@contextlib.contextmanager
def _verl_packages(root: Path):
    """verl's packages as namespace packages, the verl names core_algos imports stood in, while loading."""
    modules = checkout.namespace_packages(
        root, ("verl", "verl.utils", "verl.trainer", "verl.trainer.ppo", "verl.workers")
    )
    utils = modules["verl.utils"]
    utils.as_torch_index = _refused("verl.utils.as_torch_index")
    utils.group_mean_std = _refused("verl.utils.group_mean_std")
    modules["verl.trainer.config"] = _placeholder_module(
        "verl.trainer.config", AlgoConfig=_refused("verl.trainer.config.AlgoConfig")
    )
    modules["verl.workers.config"] = _placeholder_module(
        "verl.workers.config", ActorConfig=_refused("verl.workers.config.ActorConfig")
    )
    modules["verl.utils.device"] = _placeholder_module(
        "verl.utils.device",
        get_device_name=lambda: "cpu",
        get_torch_device=_refused("verl.utils.device.get_torch_device"),
        is_npu_available=False,
        is_cuda_available=False,
    )
    with (
        checkout.as_sys_modules(modules, "verl"),
        provided(tuple(Placeholder(name, "import-only") for name in IMPORT_ONLY)),
    ):
        yield modules


def core_algos(root: Path) -> types.ModuleType | None:
    """``verl/trainer/ppo/core_algos.py`` (and the ``torch_functional.py`` it uses), None where absent."""

    def load():
        if not (root / CORE_ALGOS).is_file():
            return None
        with _verl_packages(root):
            module = _execute("lph_upstream_verl_core_algos", root / CORE_ALGOS)
        for name in ("agg_loss", "get_policy_loss_fn"):
            if not hasattr(module, name):
                return None
        return module

    return _cached(root, "core_algos", load)


class _PackedSeqParams:
    """Megatron's ``PackedSeqParams`` as the packing helpers use it: a record of the keyword arguments.

    Its ``**kwargs`` signature is what verl's ``_PACKED_SEQ_PARAMS_HAS_CP_PARTITION_MODE``
    takes for a Megatron that knows ``cp_partition_mode`` (both CP layouts).
    """

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class _LoggerOnce(logging.LoggerAdapter):
    """verl's module logger with the ``warning_once`` transformers installs on ``logging.Logger``."""

    def warning_once(self, message, *args, **kwargs):
        if message not in _WARNED:
            _WARNED.add(message)
            self.warning(message, *args, **kwargs)


_WARNED: set = set()


def mcore_util(root: Path) -> types.ModuleType | None:
    """``verl/models/mcore/util.py`` (``preprocess_thd_engine`` / ``postprocess_thd_engine``), None where absent."""

    def load():
        if not (root / MCORE_UTIL).is_file():
            return None
        megatron_stand_in.install()
        modules = checkout.namespace_packages(root, ("verl", "verl.utils", "verl.models", "verl.models.mcore"))
        modules["verl.utils.device"] = _placeholder_module("verl.utils.device", is_npu_available=False)
        modules["verl.utils.model"] = _placeholder_module(
            "verl.utils.model", CausalLMOutputForPPO=_refused("verl.utils.model.CausalLMOutputForPPO")
        )
        packed_seq_params = _placeholder_module("megatron.core.packed_seq_params", PackedSeqParams=_PackedSeqParams)
        saved = sys.modules.get(packed_seq_params.__name__)
        sys.modules[packed_seq_params.__name__] = packed_seq_params
        try:
            with checkout.as_sys_modules(modules, "verl"):
                module = _execute("lph_upstream_verl_mcore_util", root / MCORE_UTIL)
        finally:
            if saved is None:
                del sys.modules[packed_seq_params.__name__]
            else:
                sys.modules[packed_seq_params.__name__] = saved
        if not all(hasattr(module, name) for name in ("preprocess_thd_engine", "postprocess_thd_engine")):
            return None
        if hasattr(module, "logger"):
            module.logger = _LoggerOnce(module.logger, {})
        return module

    return _cached(root, "mcore_util", load)
