"""What the files of the verl record import that the harness provides (the record's placeholders), written from the
upstream SIGNATURES only. Megatron's cross entropy is ``megatron_cross_entropy``'s (a defect of Megatron's own kernel
is out of reach); ``ActorConfig`` is the adapter's strict settings (verl's GSPO and CISPO assert its type).
"""

from __future__ import annotations

import dataclasses
import types

from harness.targets.upstream import megatron_cross_entropy, megatron_stand_in
from harness.targets.upstream.placeholders import Placeholder, holding, refusing
from harness.targets.upstream.settings import StrictSettings
from harness.targets.verl.policy import ActorSettings


def _stand_in(refused: str = "", package: bool = False, **attributes):
    """A placeholder's ``build``: a module holding ``attributes`` and the ``refused`` names, which refuse to be used."""

    def build(name: str) -> types.ModuleType:
        module = holding(__doc__="harness stand-in (harness/targets/verl/stand_ins.py)", **attributes)(name)
        module.__dict__.update({r: refusing(f"{name}.{r}") for r in refused.split()})
        if package:
            module.__path__ = []  # the loader finds the tree's submodules by name
        return module

    return build


# Megatron's PackedSeqParams as a record of its fields, the CP layout's (which verl looks for among them) included.
_FIELDS = "qkv_format cu_seqlens_q cu_seqlens_kv cu_seqlens_q_padded cu_seqlens_kv_padded max_seqlen_q max_seqlen_kv"
_PackedSeqParams = dataclasses.make_dataclass(
    "PackedSeqParams", [(f, object, None) for f in f"{_FIELDS} local_cp_size cp_group cp_partition_mode".split()]
)


class _Metric:
    """``verl.utils.metric.Metric`` as ``ppo_loss`` builds it: a value and how to aggregate it (never read here)."""

    def __init__(self, aggregation, value=None):
        self.aggregation, self.value = aggregation, value

    @classmethod
    def from_dict(cls, data, aggregation):
        return {key: cls(aggregation, value) for key, value in data.items()}


_AGGREGATION = types.SimpleNamespace(MEAN="mean", SUM="sum", MIN="min", MAX="max")  # AggregationType's members
_DEVICE = {"get_device_name": lambda: "cpu", "is_npu_available": False, "is_cuda_available": False}
# verl's own modules, stood in even where the tree has them (the loader never runs a package's __init__)
_REPLACED = {
    "verl.utils": (
        "the package __init__'s re-exports core_algos imports",
        _stand_in("as_torch_index group_mean_std", package=True),
    ),
    "verl.utils.device": ("no accelerator", _stand_in("get_torch_device get_device_id", **_DEVICE)),
    "verl.utils.model": (
        "CausalLMOutputForPPO, for util.py functions never called here",
        _stand_in("CausalLMOutputForPPO"),
    ),
    "verl.utils.megatron_utils": (
        "unwrap_model (model_forward.py)",
        _stand_in(unwrap_model=lambda model, *args, **kwargs: model),
    ),
    "verl.utils.metric": (
        "the metric records ppo_loss returns beside the loss (the package __init__ re-exports them)",
        _stand_in(package=True, AggregationType=_AGGREGATION, Metric=_Metric),
    ),
    "verl.workers.config": (
        "ActorConfig as the adapter's settings",
        _stand_in("CriticConfig MtpConfig HFModelConfig", ActorConfig=ActorSettings),
    ),
    "verl.trainer.config": ("AlgoConfig, for the advantage estimators", _stand_in("AlgoConfig", package=True)),
}
PLACEHOLDERS = (
    megatron_stand_in.PLACEHOLDER,
    Placeholder(
        "megatron.core.tensor_parallel",
        "Megatron's vocab_parallel_cross_entropy (vocab_parallel_log_probs_from_logits)",
        lambda n: megatron_cross_entropy.install(),
        "process",
    ),
    Placeholder(
        "megatron.core.packed_seq_params",
        "PackedSeqParams, a record (util.py)",
        _stand_in(PackedSeqParams=_PackedSeqParams),
    ),
    *(Placeholder(name, why, build, replaces=True) for name, (why, build) in _REPLACED.items()),
    *(
        Placeholder(name, "imported at module level for functions never called here")
        for name in ("tensordict", "transformers", "omegaconf", "codetiming", "hydra")
    ),
)


class Engine(StrictSettings):
    """``self`` of ``MegatronEngineWithLMHead._lm_head_logits_processor``: its engine config only."""

    READ_AS = "verl MegatronEngineWithLMHead"
    MAPPED_IN = "harness/targets/verl/stand_ins.py (engine)"


class EngineConfig(Engine):
    READ_AS = "verl engine config"


def engine(chunk_size) -> Engine:
    """The engine whose processor chunks the entropy by ``chunk_size`` (None: unchunked)."""
    chunking = chunk_size is not None
    return Engine(
        engine_config=EngineConfig(
            entropy_from_logits_with_chunking=chunking, entropy_from_logits_chunk_size=chunk_size
        )
    )
