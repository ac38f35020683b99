"""The NeMo-RL family (NVIDIA-NeMo/RL): ``nemo_rl=PATH`` (a checkout).

``nemo_rl/distributed/model_utils.py`` runs from the checkout, on one rank with Megatron's stand-in group
``SINGLE_RANK``. NeMo's wrappers roll a sequence's tokens and drop its last position, which a target per row cannot
express without copying the logits: the token and hidden entries call the Functions beneath them, the packed entry
the wrapper that rolls. ``inference_only`` is ``not torch.is_grad_enabled()``, as NeMo's DTensor helper passes it.
"""

from __future__ import annotations

import torch

from harness.targets.nemo_rl import policy
from harness.targets.upstream import calls, megatron_stand_in, packing
from harness.targets.upstream.family import Entry, Family, Module, Option, Symbol, on_cuda, parameters
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.placeholders import Placeholder

TOKEN = ("DistributedLogprob", "ChunkedDistributedLogprob", "ChunkedDistributedEntropy")
PACKED = "from_parallel_logits_to_logprobs_packed_sequences"
SAMPLING = ("DistributedLogprobWithSampling", "ChunkedDistributedLogprobWithSampling")
HIDDEN = "ChunkedDistributedHiddenStatesToLogprobs"
FUSION_PATCH = (
    "imported at the top of model_utils.py from #2036 to #2648 (lazily since), for the linear CE fusion patch of "
    "GPTModel, never called here"
)


def _entropy(up, logits_3d, call):
    """NeMo's ``sum p log p`` per row, negated into the protocol's ``H``; ``[rows]``, gated by the caller's no_grad."""
    chunk = call.chunk_size if call.chunk_size is not None else max(int(logits_3d.shape[1]), 1)
    with torch.set_grad_enabled(call.entropy_grad and torch.is_grad_enabled()):
        negative = up.ChunkedDistributedEntropy.apply(logits_3d, chunk, call.group, not torch.is_grad_enabled())
    return -negative.squeeze(0)


def token(up, call: calls.TokenCall):
    """``DistributedLogprob`` / ``ChunkedDistributedLogprob`` on the rows as ``B = 1`` (a view); the entropy
    ``ChunkedDistributedEntropy``'s ``sum p log p`` negated (a unit), under ``torch.no_grad()`` when not wanted."""
    start, end = call.vocab_bounds
    batched, targets = call.logits.unsqueeze(0), call.targets.unsqueeze(0)
    chunk = () if call.chunk_size is None else (call.chunk_size,)  # the chunked Function's one more argument
    fn = up.ChunkedDistributedLogprob if chunk else up.DistributedLogprob
    log_probs = fn.apply(batched, targets, start, end, *chunk, call.group, not torch.is_grad_enabled())
    return log_probs.squeeze(0), (_entropy(up, batched, call) if call.with_entropy else None)


def packed(up, call: calls.PackedCall):
    """Called as NeMo's log-prob post-processor (``models/megatron/train.py``) calls it: the whole stream's
    unrolled tokens (NeMo rolls them), ``cu_seqlens_padded`` (``packing.py``), the end padding left out (a view);
    NeMo gathers CP and returns every sample on every rank, so this rank's zigzag view is picked. NeMo has no
    packed entropy: ``ChunkedDistributedEntropy`` on the local rows, each sample's response picked."""
    chunk = {} if call.chunk_size is None else {"chunk_size": call.chunk_size}
    out, stream, cp, cp_rank = packing.call_packed_entry(
        getattr(up, PACKED), call, call.logits, inference_only=not torch.is_grad_enabled(), **chunk
    )
    entropy = None
    if call.with_entropy:
        entropy = packing.per_sample_rows(_entropy(up, stream.unsqueeze(0), call), call.inputs, cp, cp_rank)
    return packing.per_sample_view(out, call.inputs, cp, cp_rank), entropy


def sampling(up, call: calls.SamplingCall):
    """``*LogprobWithSampling`` on the rows padded with zero logits (target 0) to a multiple of the TP size, as NeMo
    needs ``B * S``, the padding's outputs dropped; a chunk size rounded up to such a multiple (NeMo refuses others)."""
    rows, tp = call.logits.shape[0], call.tp[0]
    pad = (-rows) % tp
    logits = torch.cat([call.logits, call.logits.new_zeros(pad, call.logits.shape[1])]) if pad else call.logits
    targets = torch.cat([call.targets, call.targets.new_zeros(pad)]) if pad else call.targets
    top_p = 1.0 if call.kept.top_p is None else call.kept.top_p
    chunk = () if call.chunk_size is None else (-(-call.chunk_size // tp) * tp,)
    fn = up.ChunkedDistributedLogprobWithSampling if chunk else up.DistributedLogprobWithSampling
    batched, targets = logits.unsqueeze(0), targets.unsqueeze(0)
    log_probs = fn.apply(batched, targets, call.group, call.kept.top_k, top_p, *chunk, not torch.is_grad_enabled())
    return log_probs.squeeze(0)[:rows], None


def hidden(up, call: calls.HiddenCall):
    """``ChunkedDistributedHiddenStatesToLogprobs`` on NeMo's sequence-first ``[S, B = 1, H]``, one rank."""
    start, end = call.vocab_bounds
    chunk = max(call.hidden.shape[0], 1) if call.chunk_size is None else call.chunk_size
    log_probs = up.ChunkedDistributedHiddenStatesToLogprobs.apply(
        call.hidden.unsqueeze(1), call.targets.unsqueeze(0), call.weight, start, end, chunk, call.group,
        not torch.is_grad_enabled(),
    )  # fmt: skip
    return log_probs.squeeze(0).float(), None


def _chunking(up) -> bool:
    """Both logits paths take a chunk size: the chunked Function, and the packed entry point's parameter."""
    entry = getattr(up, PACKED)
    return up.ChunkedDistributedLogprob is not None and (entry is None or "chunk_size" in parameters(entry))


NEMO_RL = Family(
    name="nemo_rl",
    locate=Locate("nemo_rl", "nemo_rl/distributed/model_utils.py", "LPH_NEMO_RL_PATH"),
    modules={"model_utils": Module(("nemo_rl.distributed.model_utils",))},
    symbols={name: Symbol("model_utils", (name,)) for name in (*TOKEN, PACKED, *SAMPLING, HIDDEN)},
    entries=(
        Entry("token_log_probs", ("DistributedLogprob",), token, frozenset({"token"})),
        Entry(
            "packed_log_probs",
            (PACKED, "DistributedLogprob"),
            packed,
            frozenset({"packed"}),
            since="the packed entry point arrived with sequence packing (#704, 2025-07) after the token Functions",
        ),
        Entry(
            "sampling_log_probs",
            SAMPLING,
            sampling,
            frozenset({"sampling", "sampling_derived", "sampling_neg_inf"}),
            since="the *LogprobWithSampling Functions arrived with top-k/top-p training (#2053, 2026-03)",
        ),
        Entry(
            "hidden_log_probs",
            (HIDDEN,),
            hidden,
            frozenset({"hidden"}),
            since="the fused LM head arrived with the chunked linear CE loss (#2036, 2026-03)",
            lacks={"entropy": f"{HIDDEN} returns log-probs only", "entropy_gate": "as entropy"},
        ),
        Entry(
            "token_policy_loss",
            ("loss_class",),
            policy.token_policy_loss,
            frozenset({"token_policy_loss"}),
            since="the loss package (nemo_rl/algorithms/loss/, #1920, 2026-03): before it, ClippedPGLossFn took "
            "logits and composed its log-probs itself, a form the token-level entry does not map",
        ),
    ),
    options=(
        Option("chunking", (_chunking,), "token"),
        Option("entropy", ("ChunkedDistributedEntropy",), "token"),
        Option("entropy_gate", ("ChunkedDistributedEntropy",), "token"),
        Option("cp_zigzag", (on_cuda(f"{PACKED}(cp_group)"),), "packed"),  # see not_declared
        *policy.OPTIONS,
    ),
    placeholders=(
        megatron_stand_in.PLACEHOLDER,
        *(Placeholder(name, FUSION_PATCH) for name in ("megatron.core.models.gpt", "megatron.core.utils")),
    ),
    not_declared={
        "cp_zigzag": "on a CPU device only: AllGatherCPTensor's backward moves its index to CUDA with .cuda() "
        "(since CP arrived, #704), so it is declared with LPH_DEVICE=cuda",
        "cp_allgather": "NeMo-RL has no DSA-style allgather context parallelism",
        "bshd": "its packed entry point is thd only",
        **dict.fromkeys(("response_only", "loss_mask_only"), "NeMo-RL evaluates every row"),
        "temperature": "applied by NeMo's caller (its sampling parameters) before these Functions, outside them",
        "donation": "NeMo-RL never writes the gradient over the logits",
        "hidden_tp": "its hidden-state Function takes sequence-parallel hidden states and returns a sequence-sharded "
        "gradient, not the replicated hidden states of the protocol",
        **dict.fromkeys(("sampling_csr", "sampling_dense"), "no given-K form: NeMo derives K on the trainer"),
        "sampling_ties_all": "its top-p keeps the copies of a tied crossing value the mass needs, as vLLM does",
        "sampling_min_p": "TrainingSamplingParams has no min-p",
        "sampling_entropy": "its entropy is over the full vocabulary",
        **dict.fromkeys(("sampling_error", "sampling_force_keep"), "a target outside K gets -inf (sampling_neg_inf)"),
        **policy.NOT_DECLARED,
    },
    expectations=("nemo_rl.toml",),
    prepare=policy.load,
    combinations=policy.combination_needs,
)
