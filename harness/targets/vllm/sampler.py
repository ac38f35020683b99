"""vLLM's top-k / top-p logits processing as a sampling target of derived form: the engine's rule on the same oracle.

``--target harness.targets.vllm.sampler:VllmSamplerTarget`` with
``LPH_VLLM_PATH`` at a vLLM checkout (or an installed ``vllm``). Only
``apply_top_k_top_p_pytorch`` is loaded from
``vllm/v1/sample/ops/topk_topp_sampler.py`` (``load_symbol``: the function
and the module-level code it needs, none of the module's heavy imports);
nothing is copied here. It is the path ``apply_top_k_top_p`` takes without
Triton (``allow_cpu_sync`` on the CPU, as that dispatcher passes it: top-k
alone then goes through ``apply_top_k_only``). With Triton importable, vLLM
runs its Triton kernel instead, which keeps exactly ``k`` copies of a tied
k-th value, lowest ids first (docs/sampling.md, "Ties at the k-th value"):
that kernel is not this target.

The call as vLLM's sampler makes it (docs/sampling.md, "Derived from the
logits: vLLM's order"):

* TP: vLLM gathers the vocab-parallel logits to full rows before sampling
  (``LogitsProcessor._gather_logits``); so does the adapter (an all-gather;
  the other ranks' columns enter as constants, so each rank's gradient is its
  own columns' share of the same row loss);
* logits to float32, then ``z = logits / temperature`` (``Sampler``);
* ``k`` per row as the input batch stores it: ``top_k`` when ``0 < top_k < V``,
  else ``V`` (``gpu_input_batch.py``: "0 < top_k < self.vocab_size"); ``None``
  when the Case has no top-k; ``p`` as float32, ``None`` without top-p;
* the processed log-probs are ``log_softmax(processed logits)`` at the target
  (``logprobs_mode="processed_logprobs"``, ``TopKTopPSampler.forward_native``),
  ``-inf`` for a target outside ``K``;
* ``chunk_size`` splits the rows into smaller batches (rows are independent
  requests to the sampler).

vLLM has no backward: the values are vLLM's bits, and their gradient is the
adapter's, ``d/dz log_softmax`` over vLLM's ``K`` held constant (the
contract's), so the gradient check reads vLLM's ``K`` a second time, nothing
more.

Min-p, where the checkout has ``vllm/v1/sample/logits_processor/builtin.py``:
its ``MinPLogitsProcessor`` (loaded the same way, its base class and the
batch-update types stood in) runs between the temperature and top-k, as
``Sampler`` orders them, through its own lifecycle: constructed for the batch,
told by ``update_state`` that every row is a request with this ``min_p``,
then ``apply``.

Declared: ``sampling``, ``sampling_derived``, ``sampling_neg_inf``,
``temperature``, ``chunking``, and ``sampling_min_p`` where min-p loads. Not
declared: ``sampling_csr`` / ``sampling_dense`` (vLLM derives ``K``), ``sampling_ties_all``
(top-p keeps the count of tied copies the mass needs), ``sampling_entropy``
(the sampler computes no entropy), ``sampling_error`` /
``sampling_force_keep``.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from harness.targets.protocol import Target
from harness.targets.upstream.checkout import revision
from harness.targets.upstream.located import package_root
from harness.targets.upstream.symbols import load_symbol

PATH_VARIABLE = "LPH_VLLM_PATH"
SAMPLER_FILE = Path("vllm/v1/sample/ops/topk_topp_sampler.py")
FUNCTION = "apply_top_k_top_p_pytorch"
MIN_P_FILE = Path("vllm/v1/sample/logits_processor/builtin.py")
MIN_P_CLASS = "MinPLogitsProcessor"
# what the class's module imports for its base class and the batch-update types (only their names are read)
MIN_P_STAND_INS = {
    "LogitsProcessor": object,
    "BatchUpdate": object,
    "MoveDirectionality": SimpleNamespace(SWAP="swap", UNIDIRECTIONAL="unidirectional"),
}
CAPABILITIES = frozenset({"sampling", "sampling_derived", "sampling_neg_inf", "temperature", "chunking"})


def vllm_root(root=None) -> Path:
    """The checkout: ``root``, else ``LPH_VLLM_PATH``, else the installed ``vllm`` (holding the sampler ops file)."""
    if root is not None:
        path = Path(root).expanduser().resolve()
        if not (path / SAMPLER_FILE).is_file():
            raise FileNotFoundError(f"root={root}: no {SAMPLER_FILE} under it (give the vLLM checkout's root)")
        return path
    return package_root("vllm", PATH_VARIABLE, SAMPLER_FILE, "pip install vllm")


def full_rows(logits: torch.Tensor, tp_group) -> torch.Tensor:
    """The whole rows, TP shards side by side in rank order; only this rank's columns carry its graph."""
    if tp_group is None or dist.get_world_size(tp_group) == 1:
        return logits
    parts = [torch.empty_like(logits) for _ in range(dist.get_world_size(tp_group))]
    dist.all_gather(parts, logits.detach().contiguous(), group=tp_group)
    parts[dist.get_rank(tp_group)] = logits
    return torch.cat(parts, dim=1)


def _chunks(rows: int, chunk_size) -> list:
    step = rows if not chunk_size else chunk_size
    return [(start, min(start + step, rows)) for start in range(0, rows, max(step, 1))] or [(0, 0)]


class VllmSamplerTarget(Target):
    """vLLM's ``apply_top_k_top_p_pytorch`` as a derived-``K`` sampling target (see the module docstring)."""

    files_under_test = (str(SAMPLER_FILE), str(MIN_P_FILE))  # what a history replay keys revisions by

    capabilities = CAPABILITIES

    def __init__(self, root=None):
        self.root = vllm_root(root)
        self.revision = revision(self.root)
        self.name = f"vllm@{self.revision}" if self.revision else "vllm"
        self._apply = load_symbol(self.root / SAMPLER_FILE, FUNCTION)
        self._min_p_class = None
        if (self.root / MIN_P_FILE).is_file():
            self._min_p_class = load_symbol(self.root / MIN_P_FILE, MIN_P_CLASS, stand_ins=MIN_P_STAND_INS)
            self.capabilities = CAPABILITIES | {"sampling_min_p"}

    def _min_p(self, z: torch.Tensor, min_p) -> torch.Tensor:
        """``MinPLogitsProcessor`` over the rows ``z`` (in place), every row a request with this ``min_p``."""
        rows = z.shape[0]
        config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=max(rows, 1)))
        processor = self._min_p_class(config, z.device, False)
        added = [(index, SimpleNamespace(min_p=float(min_p)), None, None) for index in range(rows)]
        processor.update_state(SimpleNamespace(added=added, removed=[], moved=[], batch_size=rows))
        return processor.apply(z)

    def _processed(self, z: torch.Tensor, top_k, top_p, min_p) -> torch.Tensor:
        """vLLM's processed logits of the float32 rows ``z`` (a private copy: the ops write in place)."""
        rows, vocab = z.shape
        z = z.clone()
        if min_p is not None:
            z = self._min_p(z, min_p)
        k = None if top_k is None else torch.full((rows,), top_k if 0 < top_k < vocab else vocab, dtype=torch.int32)
        p = None if top_p is None else torch.full((rows,), float(top_p), dtype=torch.float32)
        k, p = (None if t is None else t.to(z.device) for t in (k, p))
        return self._apply(z, k, p, allow_cpu_sync=z.device.type == "cpu")

    def sampling_log_probs(
        self, logits, targets, kept, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature, on_outside
    ):
        if kept.form != "derived" or (kept.min_p is not None and self._min_p_class is None):
            raise ValueError(f"{self.name}: only top_k / top_p (min_p with min-p loaded) derived by vLLM (got {kept})")
        if with_entropy:
            raise ValueError(f"{self.name}: vLLM's sampler computes no entropy (capability not declared)")
        z = full_rows(logits, tp_group).float() / temperature
        pieces = []
        for start, end in _chunks(z.shape[0], chunk_size):
            rows = z[start:end]
            target = targets[start:end].long().unsqueeze(1)
            with torch.no_grad():
                processed = self._processed(rows.detach(), kept.top_k, kept.top_p, kept.min_p)
                values = processed.log_softmax(dim=-1, dtype=torch.float32).gather(1, target).squeeze(1)
            replay = torch.where(torch.isfinite(processed), rows, -math.inf).log_softmax(dim=-1)
            replay = replay.gather(1, target).squeeze(1)
            # vLLM's bits; the gradient of the same log_softmax over vLLM's K (exactly 0 where it adds nothing)
            finite = torch.isfinite(values)
            pieces.append(torch.where(finite, values + (replay - replay.detach()), values))
        return torch.cat(pieces), None
