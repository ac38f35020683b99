"""What the verl record's files import that the harness provides instead (``PLACEHOLDERS``): Megatron's cross entropy
and records, verl's package ``__init__`` re-exports, no accelerator, the metric records and the batch's types. Each
stand-in is named for what reads it; verl's own modules replace the tree's, never its package ``__init__``.
"""

from __future__ import annotations

import dataclasses
import types

from harness.targets.upstream import megatron_cross_entropy, megatron_stand_in
from harness.targets.upstream.placeholders import Placeholder, absent_holding, holding, refusing
from harness.targets.verl import engine as verl_engine
from harness.targets.verl import padding as verl_padding


def _stand_in(name: str, why: str, refused: str = "", scope: str = "load", **attributes) -> Placeholder:
    """A module holding ``attributes`` and the ``refused`` names; verl's own replace the tree's (never its __init__)."""
    refusals = {r: refusing(f"{name}.{r}") for r in refused.split()}
    build = holding(__doc__="harness stand-in (harness/targets/verl/stand_ins.py)", **attributes, **refusals)
    return Placeholder(name, why, build, scope, replaces=name.partition(".")[0] == "verl")


# Megatron's PackedSeqParams as a record of its fields, the CP layout's (which verl looks for among them) included.
_FIELDS = "qkv_format cu_seqlens_q cu_seqlens_kv cu_seqlens_q_padded cu_seqlens_kv_padded max_seqlen_q max_seqlen_kv"
_PackedSeqParams = dataclasses.make_dataclass(
    "PackedSeqParams", [(f, object, None) for f in f"{_FIELDS} local_cp_size cp_group cp_partition_mode".split()]
)


class _Metric(types.SimpleNamespace):  # verl.utils.metric.Metric as ppo_loss builds it (keywords only)
    @classmethod
    def from_dict(cls, data, aggregation):
        return {key: cls(value=value, aggregation=aggregation) for key, value in data.items()}


_AGGREGATION = types.SimpleNamespace(MEAN="mean", SUM="sum", MIN="min", MAX="max")  # AggregationType's members
_DEVICE = {
    "get_device_name": lambda: "cpu",
    "is_npu_available": False,
    "is_cuda_available": False,
    "is_torch_npu_available": lambda check_device=True: False,  # attention_utils asks it (#4715, 2026-01)
}
PLACEHOLDERS = (
    megatron_stand_in.PLACEHOLDER,
    Placeholder(
        "megatron.core.tensor_parallel",
        "Megatron's vocab_parallel_cross_entropy (vocab_parallel_log_probs_from_logits)",
        lambda n: megatron_cross_entropy.install(),
        "process",
    ),
    _stand_in(
        "megatron.core.packed_seq_params", "PackedSeqParams, a record (util.py)", PackedSeqParams=_PackedSeqParams
    ),
    # __path__: a package, whose submodules the loader finds in the tree by name
    _stand_in("verl", "the package __init__'s DataProto, an annotation of 2025-09..10 files", "DataProto", __path__=[]),
    _stand_in(
        "verl.utils",
        "the package __init__'s re-exports core_algos imports",
        "as_torch_index group_mean_std",
        __path__=[],
    ),
    # also while called: verl.utils.attention_utils asks it which padding helpers to import (#4480 on)
    _stand_in("verl.utils.device", "no accelerator", "get_torch_device get_device_id", "call", **_DEVICE),
    _stand_in(
        "verl.utils.model", "CausalLMOutputForPPO, for util.py functions never called here", "CausalLMOutputForPPO"
    ),
    _stand_in(
        "verl.utils.megatron_utils", "unwrap_model (model_forward.py)", unwrap_model=lambda model, *_, **__: model
    ),
    _stand_in(
        "verl.utils.metric",
        "the metric records ppo_loss returns beside the loss (the package __init__ re-exports them)",
        __path__=[],
        AggregationType=_AGGREGATION,
        Metric=_Metric,
    ),
    _stand_in(
        "verl.workers.config",
        "ActorConfig as the adapter's settings (verl's GSPO and CISPO assert its type)",
        "CriticConfig MtpConfig HFModelConfig",
        ActorConfig=verl_engine.ActorSettings,
    ),
    _stand_in("verl.trainer.config", "AlgoConfig, for the advantage estimators", "AlgoConfig", __path__=[]),
    # the batch verl's tensordict_utils asserts it is handed (#4304 on), as ppo_loss and the padding helpers read it
    Placeholder("tensordict", "TensorDict, the batch's type", absent_holding(TensorDict=verl_engine.Batch)),
    Placeholder(
        "tensordict.tensorclass",
        "NonTensorData, which verl's tensordict_utils stores values in",
        absent_holding(NonTensorData=verl_padding.NonTensorData),
    ),
    *(
        Placeholder(name, "imported at module level for functions never called here")
        for name in ("transformers", "omegaconf", "codetiming", "hydra")
    ),
)
