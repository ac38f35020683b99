"""What SkyRL's ``ppo_utils.py`` imports at load time that the harness neither installs nor needs (the record's
placeholders), written from upstream's signatures and documented behaviour only.

``cloudpickle`` (imported inside ``try``/``except ImportError``) is deliberately not one, so SkyRL's own fallback
runs. ``skyrl.train.config`` is stood in even where the tree has it (its package pulls in ``skyrl_gym`` and the
whole trainer): its ``AlgorithmConfig`` is the adapter's strict settings, so a version reading a setting the
adapter does not map fails loudly.
"""

from __future__ import annotations

import logging
import types
import typing

from harness.targets.upstream.placeholders import Placeholder, absent, holding
from harness.targets.upstream.settings import StrictSettings


class AlgorithmSettings(StrictSettings):
    """SkyRL's ``cfg.algorithm`` as the adapter fills it; reading a setting it did not provide raises."""

    READ_AS = "SkyRL config"
    MAPPED_IN = "harness/targets/skyrl/policy.py (algorithm_settings)"


def _ray(name: str) -> types.ModuleType:
    """No cluster: the registry keeps its functions locally (SkyRL's documented behaviour without Ray), ``remote``
    returns the class unchanged; any other attribute (``ray.get``, ...) refuses to be used (``absent``)."""
    module = absent(name)
    module.is_initialized = lambda: False
    module.remote = lambda cls=None, **options: cls if cls is not None else (lambda inner: inner)
    return module


class _Logger:
    """``loguru.logger``'s methods the module calls, forwarded to ``logging``."""

    _log = logging.getLogger("skyrl")

    def __getattr__(self, level):
        if level.startswith("__"):
            raise AttributeError(level)
        return getattr(self._log, "info" if level == "success" else level)  # a missing level: AttributeError


class _Annotation:
    """``Float[torch.Tensor, "b s"]`` at definition time: any subscript is ``typing.Any``."""

    def __class_getitem__(cls, item):
        return typing.Any


_jaxtyping = holding(Float=type("Float", (_Annotation,), {}), Integer=type("Integer", (_Annotation,), {}))
_config = holding(__doc__="harness stand-in (harness/targets/skyrl/stand_ins.py)", AlgorithmConfig=AlgorithmSettings)

PLACEHOLDERS = (
    Placeholder("ray", "the registry's optional actor sync and @ray.remote", _ray),
    Placeholder("loguru", "logging, also inside gspo_policy_loss", holding(logger=_Logger()), scope="call"),
    Placeholder("jaxtyping", "annotations evaluated at definition time", _jaxtyping),
    Placeholder("omegaconf", "a type annotation"),
    Placeholder("numpy", "one KL controller's arithmetic, never called here"),
    Placeholder("skyrl.train", "the trainer package, never executed", holding(__path__=[]), replaces=True),
    Placeholder("skyrl.train.config", "AlgorithmConfig, as the adapter's strict settings", _config, replaces=True),
)
