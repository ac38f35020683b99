"""Stand-ins for what SkyRL's policy-loss module imports at load time (see policy.py).

SkyRL's ``skyrl/backends/skyrl_train/utils/ppo_utils.py`` (``ppo_policy_loss``,
its ``PolicyLossRegistry``, the advantage pre-scaling that implements the loss
reduction) imports, at module level, packages the harness neither installs nor
needs: ``ray`` (the registry's optional actor sync; ``@ray.remote`` on a class),
``loguru`` (logging), ``jaxtyping`` (annotations evaluated at definition time),
``omegaconf`` (a type annotation), ``numpy`` (one KL controller's arithmetic)
and the trainer config ``skyrl.train.config`` (whose package pulls in
``skyrl_gym`` and the whole trainer). Written here from the upstream
SIGNATURES and documented behaviour only; no upstream code is copied.

* A package that IS installed is used as it is; stand-ins are given only for
  absent ones (``IMPORT_TIME``), and only while SkyRL's modules are being
  loaded (``loading``): they are removed from ``sys.modules`` afterwards, so no
  other code ever sees them. The list is explicit: ``cloudpickle``, which
  ppo_utils imports inside ``try``/``except ImportError`` (falling back to
  pickle), is deliberately NOT on it, so SkyRL's own fallback runs.
* ``ray``: ``is_initialized()`` answers False (no cluster: the registry keeps
  its functions locally, which is SkyRL's documented behaviour without Ray),
  ``remote`` returns the class unchanged; any other use raises.
* ``loguru.logger`` forwards to the standard ``logging`` module.
* ``jaxtyping.Float`` / ``Integer`` subscript to ``typing.Any``.
* ``omegaconf.DictConfig`` / ``OmegaConf`` and ``numpy``: placeholders that
  raise when used (the paths the adapter drives never use them).
* ``skyrl.train.config.AlgorithmConfig``: ``AlgorithmSettings``, an attribute
  bag that raises an error naming any setting the adapter did not provide (an
  unknown SkyRL version reading a new option fails loudly).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import types
import typing

from harness.targets.upstream.placeholders import absent
from harness.targets.upstream.settings import StrictSettings

# Packages SkyRL's ppo_utils imports at module level and the adapter's calls never need.
IMPORT_TIME = ("ray", "loguru", "jaxtyping", "omegaconf", "numpy")
# gspo_policy_loss imports loguru inside the call (its warning for a reduction other than sequence_mean).
CALL_TIME = ("loguru",)
CONFIG_MODULE = "skyrl.train.config"


class AlgorithmSettings(StrictSettings):
    """SkyRL's ``cfg.algorithm`` as the adapter fills it; reading a setting it did not provide raises."""

    READ_AS = "SkyRL config"
    MAPPED_IN = "harness/targets/skyrl/policy.py (algorithm_settings)"


def _refuse(what: str):
    def refused(*args, **kwargs):
        raise ModuleNotFoundError(f"{what} was used, but the SkyRL adapter runs without Ray (stand-in)")

    return refused


def _ray() -> types.ModuleType:
    module = absent("ray")
    module.is_initialized = lambda: False
    module.remote = lambda cls=None, **options: cls if cls is not None else (lambda inner: inner)
    for name in ("get", "get_actor", "kill", "init"):
        setattr(module, name, _refuse(f"ray.{name}"))
    return module


class _Logger:
    """``loguru.logger``'s methods the module calls, forwarded to ``logging``."""

    _log = logging.getLogger("skyrl")

    def __getattr__(self, level):
        if level.startswith("__"):
            raise AttributeError(level)
        method = getattr(self._log, level if level != "success" else "info", None)
        if method is None:
            raise AttributeError(level)
        return method


def _loguru() -> types.ModuleType:
    module = types.ModuleType("loguru")
    module.logger = _Logger()
    return module


class _Annotation:
    """``Float[torch.Tensor, "b s"]`` at definition time: any subscript is ``typing.Any``."""

    def __class_getitem__(cls, item):
        return typing.Any


def _jaxtyping() -> types.ModuleType:
    module = types.ModuleType("jaxtyping")
    module.Float = type("Float", (_Annotation,), {})
    module.Integer = type("Integer", (_Annotation,), {})
    return module


def _config() -> dict:
    """``skyrl.train`` and ``skyrl.train.config`` holding only ``AlgorithmConfig``."""
    train = types.ModuleType("skyrl.train")
    train.__path__ = []
    config = types.ModuleType(CONFIG_MODULE)
    config.__doc__ = "harness stand-in (harness/targets/skyrl/stand_ins.py)"
    config.AlgorithmConfig = AlgorithmSettings
    train.config = config
    return {"skyrl.train": train, CONFIG_MODULE: config}


_BUILDERS = {"ray": _ray, "loguru": _loguru, "jaxtyping": _jaxtyping}


@contextlib.contextmanager
def loading(modules: dict):
    """While SkyRL's policy modules load: absent import-time packages stood in, the config stand-in in ``modules``.

    ``modules`` is the private ``skyrl*`` namespace the adapter presents (checkout.as_sys_modules); the trainer
    config goes there so it never shadows a real ``skyrl`` package elsewhere in the process.
    """
    modules.update(_config())
    with absent_packages(IMPORT_TIME):
        yield


@contextlib.contextmanager
def absent_packages(names):
    """``names`` that are not installed stood in ``sys.modules`` for the duration, removed afterwards."""
    added = []
    for name in names:
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            continue
        sys.modules[name] = _BUILDERS.get(name, lambda name=name: absent(name))()
        added.append(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)
