"""What the files of the verl record import that the harness provides (the record's placeholders; why each, on
the generated family page). Written from the upstream SIGNATURES only; no upstream code is copied.

Megatron's vocab-parallel cross entropy is ``megatron_cross_entropy``'s, whose backward is the stand-in's: a
defect of Megatron's own kernel is out of reach. ``verl.workers.config``'s ``ActorConfig`` is the adapter's strict
settings (``policy.ActorSettings``): verl's GSPO and CISPO assert ``isinstance(config, ActorConfig)``.
"""

from __future__ import annotations

import dataclasses
import logging
import types

from harness.targets.upstream import megatron_cross_entropy, megatron_stand_in
from harness.targets.upstream.placeholders import Placeholder, refusing
from harness.targets.upstream.settings import StrictSettings
from harness.targets.verl.policy import ActorSettings


def _module(name: str, *refused: str, package: bool = False, **attributes) -> types.ModuleType:
    """A stand-in module: ``attributes``, and ``refused`` names that refuse to be used."""
    module = types.ModuleType(name)
    module.__doc__ = "harness stand-in (harness/targets/verl/stand_ins.py)"
    if package:
        module.__path__ = []  # the loader finds the tree's submodules by name
    for key, value in {**{r: refusing(f"{name}.{r}") for r in refused}, **attributes}.items():
        setattr(module, key, value)
    return module


# Megatron's PackedSeqParams as a record of its fields, the CP layout's (which verl looks for among them) included.
_PackedSeqParams = dataclasses.make_dataclass(
    "PackedSeqParams",
    [
        (field, object, None)
        for field in (
            "qkv_format cu_seqlens_q cu_seqlens_kv cu_seqlens_q_padded cu_seqlens_kv_padded max_seqlen_q max_seqlen_kv "
            "local_cp_size cp_group cp_partition_mode"
        ).split()
    ],
)


class _Metric:
    """``verl.utils.metric.Metric`` as ``ppo_loss`` builds it: a value and how to aggregate it (never read here)."""

    def __init__(self, aggregation, value=None):
        self.aggregation, self.value = aggregation, value

    @classmethod
    def from_dict(cls, data, aggregation):
        return {key: cls(aggregation, value) for key, value in data.items()}


_AGGREGATION = types.SimpleNamespace(MEAN="mean", SUM="sum", MIN="min", MAX="max")  # AggregationType's members

# verl's own modules, stood in even where the tree has them (the loader never runs a package's __init__)
_REPLACED = {
    "verl.utils": (
        "the package __init__'s re-exports core_algos imports",
        lambda n: _module(n, "as_torch_index", "group_mean_std", package=True),
    ),
    "verl.utils.device": (
        "no accelerator",
        lambda n: _module(
            n,
            "get_torch_device",
            "get_device_id",
            get_device_name=lambda: "cpu",
            is_npu_available=False,
            is_cuda_available=False,
        ),
    ),
    "verl.utils.model": (
        "CausalLMOutputForPPO, for util.py functions never called here",
        lambda n: _module(n, "CausalLMOutputForPPO"),
    ),
    "verl.utils.megatron_utils": (
        "unwrap_model (model_forward.py)",
        lambda n: _module(n, unwrap_model=lambda model, *args, **kwargs: model),
    ),
    "verl.utils.metric": (
        "the metric records ppo_loss returns beside the loss (the package __init__ re-exports them)",
        lambda n: _module(n, package=True, AggregationType=_AGGREGATION, Metric=_Metric),
    ),
    "verl.workers.config": (
        "ActorConfig as the adapter's settings",
        lambda n: _module(n, "CriticConfig", "MtpConfig", "HFModelConfig", ActorConfig=ActorSettings),
    ),
    "verl.trainer.config": (
        "AlgoConfig, for the advantage estimators",
        lambda n: _module(n, "AlgoConfig", package=True),
    ),
}
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
    *(Placeholder(name, why, build, replaces=True) for name, (why, build) in _REPLACED.items()),
    *(
        Placeholder(name, "imported at module level for functions never called here")
        for name in ("tensordict", "transformers", "omegaconf", "codetiming", "hydra")
    ),
)


class EngineSettings(StrictSettings):
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
            entropy_from_logits_with_chunking=chunk_size is not None, entropy_from_logits_chunk_size=chunk_size
        )
    )


class _LoggerOnce(logging.LoggerAdapter):
    """verl's module logger with the ``warning_once`` that importing transformers adds to ``logging.Logger``
    (util.py pads short sequences with it)."""

    warned: set = set()

    def warning_once(self, message, *args, **kwargs):
        if message not in self.warned:
            self.warned.add(message)
            self.warning(message, *args, **kwargs)


def logger_once(module) -> None:
    if isinstance(getattr(module, "logger", None), logging.Logger):
        module.logger = _LoggerOnce(module.logger, {})
