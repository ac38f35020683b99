"""What SkyRL's policy-loss module imports at load time, provided by the harness (the SkyRL record's placeholders).

SkyRL's ``skyrl/backends/skyrl_train/utils/ppo_utils.py`` (``ppo_policy_loss``,
its ``PolicyLossRegistry``, the advantage pre-scaling that implements the loss
reduction) imports, at module level, packages the harness neither installs nor
needs: ``ray`` (the registry's optional actor sync; ``@ray.remote`` on a class),
``loguru`` (logging), ``jaxtyping`` (annotations evaluated at definition time),
``omegaconf`` (a type annotation), ``numpy`` (one KL controller's arithmetic)
and the trainer config ``skyrl.train.config`` (whose package pulls in
``skyrl_gym`` and the whole trainer). Written here from the upstream
SIGNATURES and documented behaviour only; no upstream code is copied.

* An installed package is used as it is (``placeholders.py``); ``cloudpickle``,
  which ppo_utils imports inside ``try``/``except ImportError`` (falling back
  to pickle), is deliberately NOT a placeholder, so SkyRL's own fallback runs.
* ``ray``: ``is_initialized()`` answers False (no cluster: the registry keeps
  its functions locally, which is SkyRL's documented behaviour without Ray),
  ``remote`` returns the class unchanged; any other use raises.
* ``loguru.logger`` forwards to the standard ``logging`` module (also at call
  time: ``gspo_policy_loss`` imports it inside the call).
* ``jaxtyping.Float`` / ``Integer`` subscript to ``typing.Any``.
* ``skyrl.train`` / ``skyrl.train.config`` are stood in even where the tree
  has them: ``AlgorithmConfig`` is ``AlgorithmSettings``, an attribute bag that
  raises an error naming any setting the adapter did not provide (an unknown
  SkyRL version reading a new option fails loudly).
"""

from __future__ import annotations

import logging
import types
import typing

from harness.targets.upstream.placeholders import Placeholder, absent
from harness.targets.upstream.settings import StrictSettings


class AlgorithmSettings(StrictSettings):
    """SkyRL's ``cfg.algorithm`` as the adapter fills it; reading a setting it did not provide raises."""

    READ_AS = "SkyRL config"
    MAPPED_IN = "harness/targets/skyrl/options.py (algorithm_settings)"


def _refuse(what: str):
    def refused(*args, **kwargs):
        raise ModuleNotFoundError(f"{what} was used, but the SkyRL adapter runs without Ray (stand-in)")

    return refused


def _ray(name: str) -> types.ModuleType:
    module = absent(name)
    module.is_initialized = lambda: False
    module.remote = lambda cls=None, **options: cls if cls is not None else (lambda inner: inner)
    for attribute in ("get", "get_actor", "kill", "init"):
        setattr(module, attribute, _refuse(f"ray.{attribute}"))
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


def _loguru(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.logger = _Logger()
    return module


class _Annotation:
    """``Float[torch.Tensor, "b s"]`` at definition time: any subscript is ``typing.Any``."""

    def __class_getitem__(cls, item):
        return typing.Any


def _jaxtyping(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.Float = type("Float", (_Annotation,), {})
    module.Integer = type("Integer", (_Annotation,), {})
    return module


def _train(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []
    return module


def _config(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__doc__ = "harness stand-in (harness/targets/skyrl/stand_ins.py)"
    module.AlgorithmConfig = AlgorithmSettings
    return module


PLACEHOLDERS = (
    Placeholder("ray", "the registry's optional actor sync and @ray.remote", _ray),
    Placeholder("loguru", "logging, also inside gspo_policy_loss", _loguru, scope="call"),
    Placeholder("jaxtyping", "annotations evaluated at definition time", _jaxtyping),
    Placeholder("omegaconf", "a type annotation"),
    Placeholder("numpy", "one KL controller's arithmetic, never called here"),
    Placeholder("skyrl.train", "the trainer package, never executed", _train, replaces=True),
    Placeholder("skyrl.train.config", "AlgorithmConfig, as the adapter's strict settings", _config, replaces=True),
)
