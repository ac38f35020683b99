"""What the files of the verl record import that the harness provides (the record's placeholders).

The files the record executes import, at module level, Megatron (the job's
groups: ``megatron_stand_in``; Megatron's vocab-parallel cross entropy:
``megatron_cross_entropy``, whose backward is the stand-in's, so a defect of
Megatron's own kernel is out of reach), Megatron's ``PackedSeqParams`` (a
dataclass of its fields, ``cp_partition_mode`` included: a Megatron that
knows both CP layouts), trainer modules they use only in functions never
called here, and third-party packages they only import. Written from the
upstream SIGNATURES only; no upstream code is copied.

Stood in even where the tree has them (``replaces``): ``verl.utils`` (the
package's ``__init__`` re-exports ``as_torch_index`` / ``group_mean_std``,
which ``core_algos.py`` imports for the advantage estimators; the loader
never runs an ``__init__``), ``verl.utils.device`` (no accelerator: no NPU,
the device name ``cpu``), ``verl.utils.model`` and
``verl.utils.megatron_utils`` (``unwrap_model``: the harness's model is never
wrapped), ``verl.utils.metric`` (the metric records ``ppo_loss`` returns
beside the loss, never read here), ``verl.workers.config`` (``ActorConfig`` is the adapter's strict
settings, ``policy.ActorSettings``: verl's GSPO and CISPO assert
``isinstance(config, ActorConfig)``) and ``verl.trainer.config``.
"""

from __future__ import annotations

import dataclasses
import logging
import types

from harness.targets.upstream import megatron_cross_entropy, megatron_stand_in
from harness.targets.upstream.placeholders import Placeholder, refusing
from harness.targets.upstream.settings import StrictSettings
from harness.targets.verl.policy import ActorSettings

DOC = "harness stand-in (harness/targets/verl/stand_ins.py)"


def _module(name: str, package: bool = False, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__doc__ = DOC
    if package:
        module.__path__ = []  # the loader finds the tree's submodules by name
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


@dataclasses.dataclass
class _PackedSeqParams:
    """Megatron's ``PackedSeqParams`` as the packing helpers use it: a record of its fields, the CP layout's
    (``cp_partition_mode``, which verl looks for among the fields) included."""

    qkv_format: str | None = None
    cu_seqlens_q: object = None
    cu_seqlens_kv: object = None
    cu_seqlens_q_padded: object = None
    cu_seqlens_kv_padded: object = None
    max_seqlen_q: int | None = None
    max_seqlen_kv: int | None = None
    local_cp_size: int | None = None
    cp_group: object = None
    cp_partition_mode: str | None = None


def _refused(module: str, *names: str) -> dict:
    return {name: refusing(f"{module}.{name}") for name in names}


def _utils(name):
    return _module(name, package=True, **_refused(name, "as_torch_index", "group_mean_std"))


def _device(name):
    return _module(
        name,
        get_device_name=lambda: "cpu",
        is_npu_available=False,
        is_cuda_available=False,
        **_refused(name, "get_torch_device", "get_device_id"),
    )


def _megatron_utils(name):
    return _module(name, unwrap_model=lambda model, *args, **kwargs: model)


class _Aggregation:
    """``verl.utils.metric.AggregationType``'s members, as ``ppo_loss`` names them."""

    MEAN, SUM, MIN, MAX = "mean", "sum", "min", "max"


class _Metric:
    """``verl.utils.metric.Metric`` as ``ppo_loss`` builds it: a value and how to aggregate it (never read here)."""

    def __init__(self, aggregation, value=None):
        self.aggregation, self.value = aggregation, value

    @classmethod
    def from_dict(cls, data, aggregation):
        return {key: cls(aggregation, value) for key, value in data.items()}


def _workers_config(name):
    return _module(name, ActorConfig=ActorSettings, **_refused(name, "CriticConfig", "MtpConfig", "HFModelConfig"))


PLACEHOLDERS = (
    Placeholder(
        "megatron.core.parallel_state", "the job's TP/CP groups", lambda n: megatron_stand_in.install(), "process"
    ),
    Placeholder(
        "megatron.core.tensor_parallel",
        "Megatron's vocab_parallel_cross_entropy (vocab_parallel_log_probs_from_logits)",
        lambda n: megatron_cross_entropy.install(),
        "process",
    ),
    Placeholder(
        "megatron.core.packed_seq_params",
        "PackedSeqParams, a record (util.py)",
        lambda n: _module(n, PackedSeqParams=_PackedSeqParams),
    ),
    Placeholder("verl.utils", "the package __init__'s re-exports core_algos imports", _utils, replaces=True),
    Placeholder("verl.utils.device", "no accelerator", _device, replaces=True),
    Placeholder(
        "verl.utils.model",
        "CausalLMOutputForPPO, for util.py functions never called here",
        lambda n: _module(n, **_refused(n, "CausalLMOutputForPPO")),
        replaces=True,
    ),
    Placeholder("verl.utils.megatron_utils", "unwrap_model (model_forward.py)", _megatron_utils, replaces=True),
    Placeholder(
        "verl.utils.metric",
        "the metric records ppo_loss returns beside the loss (the package __init__ re-exports them)",
        lambda n: _module(n, package=True, AggregationType=_Aggregation, Metric=_Metric),
        replaces=True,
    ),
    Placeholder("verl.workers.config", "ActorConfig as the adapter's settings", _workers_config, replaces=True),
    Placeholder(
        "verl.trainer.config",
        "AlgoConfig, for the advantage estimators",
        lambda n: _module(n, package=True, **_refused(n, "AlgoConfig")),
        replaces=True,
    ),
    *(
        Placeholder(name, "imported at module level for functions never called here")
        for name in ("tensordict", "transformers", "omegaconf", "codetiming", "hydra")
    ),
)


class EngineSettings(StrictSettings):
    """verl's Megatron ``engine_config`` as the logits processor reads it; a setting not mapped raises, naming it."""

    READ_AS = "verl engine config"
    MAPPED_IN = "harness/targets/verl/stand_ins.py (engine)"


class Engine(StrictSettings):
    """``self`` of ``MegatronEngineWithLMHead._lm_head_logits_processor``: its engine config only."""

    READ_AS = "verl MegatronEngineWithLMHead"
    MAPPED_IN = "harness/targets/verl/stand_ins.py (engine)"


def engine(chunk_size) -> Engine:
    """The engine whose processor chunks the entropy by ``chunk_size`` (None: unchunked)."""
    return Engine(
        engine_config=EngineSettings(
            entropy_from_logits_with_chunking=chunk_size is not None,
            entropy_from_logits_chunk_size=chunk_size,
        )
    )


class _LoggerOnce(logging.LoggerAdapter):
    """verl's module logger with the ``warning_once`` that importing transformers adds to ``logging.Logger``."""

    def warning_once(self, message, *args, **kwargs):
        if message not in _WARNED:
            _WARNED.add(message)
            self.warning(message, *args, **kwargs)


_WARNED: set = set()


def logger_once(module) -> None:
    """Give ``module``'s logger the ``warning_once`` a verl process has (util.py pads short sequences with it)."""
    logger = getattr(module, "logger", None)
    if isinstance(logger, logging.Logger):
        module.logger = _LoggerOnce(logger, {})
