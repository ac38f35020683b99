"""NeMo-RL's ``ChunkedDistributedHiddenStatesToLogprobs`` through the hidden-state entry point.

Loaded at run time from a NeMo-RL checkout named by ``LPH_NEMO_RL_PATH``
(its ``nemo_rl/distributed/model_utils.py``; nothing is copied here), or from
an installed ``nemo_rl``. Mapping: NeMo's Function takes sequence-parallel
hidden states ``[S_local, B, H]`` (all-gathered over TP inside), targets
``[B, S]``, this rank's head shard ``[V_local, H]`` with its vocabulary range,
an integer chunk size and the TP group; it returns log-probs ``[B, S]`` (no
entropy, no temperature). The adapter passes ``hidden.unsqueeze(1)`` (B = 1),
``targets[None]``, ``[0, V_local)``, ``chunk_size`` (``rows``, one chunk, for
``None``), and the single-rank group of ``megatron_stand_in`` (the harness runs
world 1 in-process with no process group).

Capabilities ``hidden`` and ``chunking``: one rank only (its TP path expects
sequence-parallel hidden states and returns a sequence-sharded gradient, not
the replicated ``hidden`` of this protocol), no entropy, no temperature.
Its backward builds ``one_hot(masked_target, num_classes=V_local)`` per chunk
(the docs/bugs.md #3 mechanism, NeMo-RL #4114), which the one_hot regression's
hidden-path case must report.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch.distributed as dist

from harness.targets.protocol import Target
from harness.targets.upstream import megatron_stand_in

PATH_VARIABLE = "LPH_NEMO_RL_PATH"


def _single_reduce_scatter(output, input_list, *args, **kwargs):
    output.copy_(input_list[0])


def _load_model_utils():
    path = os.environ.get(PATH_VARIABLE)
    if path:
        if not os.path.isfile(os.path.join(path, "nemo_rl", "distributed", "model_utils.py")):
            raise FileNotFoundError(
                f"{PATH_VARIABLE}={path}: no nemo_rl/distributed/model_utils.py (give a checkout root)"
            )
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        return importlib.import_module("nemo_rl.distributed.model_utils")
    except ImportError as exc:
        raise ImportError(f"NeMo-RL not importable: set {PATH_VARIABLE} to a NeMo-RL checkout ({exc})") from exc


class NemoRLHiddenTarget(Target):
    name = "nemo-rl-hidden"
    capabilities = frozenset({"hidden", "chunking"})
    files_under_test = ("nemo_rl/distributed/model_utils.py",)

    def __init__(self):
        self.module = _load_model_utils()
        if not hasattr(self.module, "ChunkedDistributedHiddenStatesToLogprobs"):
            raise AttributeError(f"{self.module.__file__} defines no ChunkedDistributedHiddenStatesToLogprobs")
        megatron_stand_in.install()
        if not getattr(dist.reduce_scatter, "__lph_single_rank__", False):
            dist.reduce_scatter = megatron_stand_in._identity_on_single_rank(
                dist.reduce_scatter, result_of_single=_single_reduce_scatter
            )

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        if with_entropy or temperature != 1.0:
            raise RuntimeError("NeMo-RL's hidden-state Function has no entropy and no temperature (not declared)")
        if tp_group is not None and dist.is_initialized() and dist.get_world_size(tp_group) != 1:
            raise RuntimeError("the NeMo-RL hidden adapter runs one rank (capability hidden_tp not declared)")
        rows = hidden.shape[0]
        log_probs = self.module.ChunkedDistributedHiddenStatesToLogprobs.apply(
            hidden.unsqueeze(1),
            targets.unsqueeze(0),
            weight,
            0,
            weight.shape[0],
            max(rows, 1) if chunk_size is None else chunk_size,
            megatron_stand_in.SINGLE_RANK,
            False,
        )
        return log_probs.squeeze(0).float(), None
