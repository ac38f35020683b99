"""SkyRL's fused LM-head log-prob (``FusedLinearChunkedDistributedLogprob``) through the hidden-state entry point.

Loaded at run time from the installed ``skyrl`` package or ``LPH_SKYRL_PATH``
(the same lookup and private-module loading as ``harness.targets.skyrl.token``;
nothing of SkyRL is copied here). SkyRL 0.3.0 ships two backends behind
``from_parallel_hidden_to_logprobs(..., fused_backend=...)``; each is a target:

* ``SkyRLHiddenTarget``: ``FusedLinearChunkedDistributedLogprob`` from
  ``distributed/megatron/model_utils.py`` (backend ``"torch"``, SkyRL's default);
* ``SkyRLHiddenTritonTarget``: ``FusedLinearLogprobTriton`` from
  ``fused_linear_logprob_triton.py`` (backend ``"triton"``, verl's kernel).

Mapping onto ``hidden_log_probs`` (docs/targets.md):

* the Functions take ``hidden [B, S, H]``, ``weight [V_local, H]``, targets
  ``[B, S]`` already rolled, the shard bounds, an integer chunk and the TP
  group; the adapter passes ``hidden[None]`` (B = 1), ``targets[None]`` and
  ``[r * V_local, (r + 1) * V_local)``. SkyRL's wrapper
  ``from_parallel_hidden_to_logprobs`` rolls the targets and drops the last
  position (no equivalent in a protocol that gives every row its target), so
  the adapter calls the Function and repeats the wrapper's two arguments:
  temperature by dividing the head (``weight / t``, autograd carries the
  ``1/t``) and the chunk (``chunk_size`` if below the row count, else all rows);
* ``grad(hidden)``: the Functions return this rank's partial ``g_r @ W_r``.
  SkyRL's trainer turns on Megatron sequence parallelism whenever TP > 1
  (``provider.sequence_parallel = tp > 1`` in its Megatron worker) and its
  output processor all-gathers the sequence-parallel hidden states with
  ``tensor_parallel_output_grad=True``, whose backward reduce-scatters: the
  TP sum. The protocol's ``hidden`` is replicated, so the adapter's
  equivalent of that seam is identity forward, all-reduce (sum) backward
  (``SumGradientOverGroup``); with one rank it is the identity;
* log-probs come back fp32; targets outside the shard are SkyRL's business
  (masked to 0 on every rank and summed over TP).

Not declared, hence UNSUPPORTED: ``entropy`` and ``entropy_gate``. SkyRL's
hidden-state entropy (``_fused_vocab_parallel_entropy_from_hidden``) is a
no-grad metric by its own docstring, and its Megatron wrapper raises
``NotImplementedError`` for ``use_entropy_loss`` with the fused head; the
protocol's ``entropy`` includes the entropy's gradient.

``SkyRLHiddenTritonTarget`` declares nothing on a CPU run: its ``forward``
raises ``RuntimeError: FusedLinearLogprobTriton requires Triton (and a CUDA
device)`` unless ``torch.cuda.is_available()``, and the launcher under it
(``efficient_entropy_forward``) asserts ``hidden.is_cuda`` and schedules on
CUDA streams, so Triton's CPU interpreter (``TRITON_INTERPRET=1``) never gets
to run the kernel. With ``LPH_DEVICE=cuda`` it declares ``hidden``,
``hidden_tp`` and ``temperature`` (not ``chunking``: the kernel ignores the
chunk argument); that configuration has not been run here (no GPU).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch.distributed as dist

from harness.targets.protocol import Target
from harness.targets.skyrl.token import MODEL_UTILS, _version, load_model_utils, skyrl_root
from harness.targets.upstream import megatron_stand_in
from harness.targets.upstream.shared_gradient import SumGradientOverGroup

TRITON_FILE = MODEL_UTILS.parent / "fused_linear_logprob_triton.py"


def _on_cuda() -> bool:
    return os.environ.get("LPH_DEVICE", "cpu").startswith("cuda")


class SkyRLHiddenTarget(Target):
    """SkyRL's ``FusedLinearChunkedDistributedLogprob`` (backend ``"torch"``; see the module docstring)."""

    capabilities = frozenset({"hidden", "hidden_tp", "chunking", "temperature"})
    backend = "torch"

    def __init__(self, root: Path | None = None):
        self.root = skyrl_root() if root is None else Path(root)
        self.name = f"skyrl-{_version(self.root)}-hidden-{self.backend}"
        self.function = self._load()

    def _load(self):
        module = load_model_utils(self.root)
        if not hasattr(module, "FusedLinearChunkedDistributedLogprob"):
            raise AttributeError(f"{self.root / MODEL_UTILS} has no FusedLinearChunkedDistributedLogprob (SkyRL < 0.3)")
        return module.FusedLinearChunkedDistributedLogprob

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        if with_entropy:
            raise RuntimeError(f"{self.name}: SkyRL's fused entropy is a no-grad metric (capability not declared)")
        megatron_stand_in.set_groups(tp_group, None)
        one_rank = tp_group is None or dist.get_world_size(tp_group) == 1
        group = megatron_stand_in.SINGLE_RANK if tp_group is None else tp_group
        tp_rank = 0 if tp_group is None else dist.get_rank(tp_group)
        vocab_local, rows = weight.shape[0], hidden.shape[0]
        if temperature != 1.0:
            weight = weight / temperature
        chunk = chunk_size if chunk_size is not None and chunk_size < rows else rows
        batched = hidden.unsqueeze(0) if one_rank else SumGradientOverGroup.apply(hidden, tp_group).unsqueeze(0)
        log_probs = self.function.apply(
            batched,
            weight,
            targets.unsqueeze(0),
            tp_rank * vocab_local,
            (tp_rank + 1) * vocab_local,
            chunk,
            group,
            False,
        )
        return log_probs.squeeze(0), None


class SkyRLHiddenTritonTarget(SkyRLHiddenTarget):
    """SkyRL's ``FusedLinearLogprobTriton`` (backend ``"triton"``): CUDA only (see the module docstring)."""

    backend = "triton"

    def __init__(self, root: Path | None = None):
        super().__init__(root)
        self.capabilities = frozenset({"hidden", "hidden_tp", "temperature"}) if _on_cuda() else frozenset()

    def _load(self):
        megatron_stand_in.install()
        spec = importlib.util.spec_from_file_location("lph_upstream_skyrl_fused_triton", self.root / TRITON_FILE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.FusedLinearLogprobTriton
