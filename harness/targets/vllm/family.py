"""vLLM's top-k / top-p / min-p logits processing (vllm-project/vllm): ``vllm==X`` or ``vllm=PATH``.

The generated page (docs/records/families/vllm.md) says what the entry calls and translates; this says why.
vLLM is an engine, not a trainer: it is checked as a sampling target of derived form, its rule against the
same oracle the trainers' replays are (docs/sampling.md, "Derived from the logits: vLLM's order"). Its sampler
module imports the engine (platforms, envs, Triton kernels), so ``apply_top_k_top_p_pytorch`` is taken alone
from it (``Loader.symbol``): the path ``apply_top_k_top_p`` takes without Triton, ``allow_cpu_sync`` on a CPU as
that dispatcher passes it. With Triton importable vLLM runs a kernel instead, which keeps exactly ``k`` copies
of a tied k-th value (docs/sampling.md, "Ties at the k-th value"): that kernel is not this entry. Min-p, where
the revision has ``MinPLogitsProcessor``, runs through its own lifecycle (built for the batch, told by
``update_state`` that every row is a request with this ``min_p``, then ``apply``), between the temperature and
top-k as ``Sampler`` orders them; its base class and batch-update types are stood in (only their names are
read).

vLLM has no backward: the values are vLLM's bits and their gradient is the contract's, ``d/dz log_softmax``
over vLLM's ``K`` held constant, so the gradient check reads vLLM's ``K`` a second time, nothing more. vLLM
gathers the vocab-parallel logits to whole rows before sampling (``LogitsProcessor._gather_logits``); the
sampler under test takes whole rows, so at TP > 1 the entry hands it the gathered rows
(``upstream/whole_vocab.py``), as it does TRL's and Liger's.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from harness.targets.upstream import calls
from harness.targets.upstream.family import Entry, Family, Option
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.whole_vocab import gather_vocabulary

SAMPLER = "vllm/v1/sample/ops/topk_topp_sampler.py"
MIN_P = "vllm/v1/sample/logits_processor/builtin.py"
MIN_P_STAND_INS = {
    "LogitsProcessor": object,
    "BatchUpdate": object,
    "MoveDirectionality": SimpleNamespace(SWAP="swap", UNIDIRECTIONAL="unidirectional"),
}


def _prepare(up) -> None:
    """``apply_top_k_top_p_pytorch`` from vllm/v1/sample/ops/topk_topp_sampler.py and ``MinPLogitsProcessor`` from
    vllm/v1/sample/logits_processor/builtin.py, each without the rest of its module (None where absent)."""
    up.read_from = {"apply_top_k_top_p_pytorch": SAMPLER, "MinPLogitsProcessor": MIN_P}
    up.apply_top_k_top_p_pytorch = up.loader.symbol_if_present(SAMPLER, "apply_top_k_top_p_pytorch")
    up.MinPLogitsProcessor = up.loader.symbol_if_present(MIN_P, "MinPLogitsProcessor", stand_ins=MIN_P_STAND_INS)


def _min_p(up, z: torch.Tensor, min_p: float) -> torch.Tensor:
    """``MinPLogitsProcessor`` over the rows ``z`` (in place), every row a request with this ``min_p``."""
    rows = z.shape[0]
    config = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=max(rows, 1)))
    processor = up.MinPLogitsProcessor(config, z.device, False)
    added = [(index, SimpleNamespace(min_p=float(min_p)), None, None) for index in range(rows)]
    processor.update_state(SimpleNamespace(added=added, removed=[], moved=[], batch_size=rows))
    return processor.apply(z)


def _processed(up, z: torch.Tensor, kept) -> torch.Tensor:
    """vLLM's processed logits of the float32 rows ``z`` (a private copy: the ops write in place). ``k`` per row as
    the input batch stores it: ``top_k`` when ``0 < top_k < V``, else ``V``; ``p`` as float32."""
    rows, vocab = z.shape
    z = z.clone()
    if kept.min_p is not None:
        z = _min_p(up, z, kept.min_p)
    k = None if kept.top_k is None else torch.full((rows,), kept.top_k if 0 < kept.top_k < vocab else vocab)
    p = None if kept.top_p is None else torch.full((rows,), float(kept.top_p))
    k = None if k is None else k.to(device=z.device, dtype=torch.int32)
    p = None if p is None else p.to(device=z.device, dtype=torch.float32)
    return up.apply_top_k_top_p_pytorch(z, k, p, allow_cpu_sync=z.device.type == "cpu")


def sampling(up, call: calls.SamplingCall):
    """Whole float32 rows divided by the temperature (``Sampler``), vLLM's processed ``log_softmax`` at the target
    (``logprobs_mode="processed_logprobs"``), ``-inf`` outside ``K``; ``chunk_size`` splits the rows into smaller
    batches (rows are independent requests to the sampler)."""
    z = gather_vocabulary(call.logits, call.tp_group).float() / call.temperature
    step = call.chunk_size or z.shape[0]
    pieces = []
    for start in range(0, z.shape[0], max(step, 1)) or [0]:  # no rows: one empty batch, still on the graph
        rows, target = z[start : start + step], call.targets[start : start + step].long().unsqueeze(1)
        with torch.no_grad():
            processed = _processed(up, rows.detach(), call.kept)
            values = processed.log_softmax(dim=-1, dtype=torch.float32).gather(1, target).squeeze(1)
        replay = torch.where(torch.isfinite(processed), rows, -math.inf).log_softmax(dim=-1).gather(1, target)
        replay = replay.squeeze(1)
        pieces.append(torch.where(torch.isfinite(values), values + (replay - replay.detach()), values))
    return torch.cat(pieces), None


VLLM = Family(
    name="vllm",
    locate=Locate("vllm", SAMPLER, "LPH_VLLM_PATH", pypi="vllm"),
    modules={},
    symbols={},
    prepare=_prepare,
    entries=(
        Entry(
            "sampling_log_probs",
            ("apply_top_k_top_p_pytorch",),
            sampling,
            frozenset({"sampling", "sampling_derived", "sampling_neg_inf", "temperature", "chunking"}),
        ),
    ),
    options=(Option("sampling_min_p", ("MinPLogitsProcessor",), extends="sampling"),),
    not_declared={
        "token": "an engine's sampler: no training log-prob path",
        "sampling_csr": "vLLM derives K from the logits; no given-K form",
        "sampling_dense": "vLLM derives K from the logits; no given-K form",
        "sampling_ties_all": "top-p keeps the count of tied copies the mass needs",
        "sampling_entropy": "the sampler computes no entropy",
        "sampling_error": "a target outside K gets -inf (sampling_neg_inf)",
        "sampling_force_keep": "a target outside K gets -inf (sampling_neg_inf)",
    },
    expectations=("vllm.toml",),
)
