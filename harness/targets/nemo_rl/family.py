"""The NeMo-RL family (NVIDIA-NeMo/RL): ``nemo_rl=PATH`` (a checkout).

The generated page (docs/records/families/nemo_rl.md) says what each entry calls and translates; this says
why. ``nemo_rl/distributed/model_utils.py`` runs from the checkout with the one module it imports at the top
(``nemo_rl/algorithms/logits_sampling_utils.py``); its ``torch.distributed`` calls on one rank go to Megatron's
stand-in group ``SINGLE_RANK``. NeMo's wrappers (``from_parallel_logits_to_logprobs``,
``from_parallel_hidden_states_to_logprobs``) take a sequence's tokens, roll them and drop the last position,
which the protocol (a target per row) cannot express without copying the logits: the token and hidden entries
call the Functions beneath them with the wrappers' chunk rule, and the roll runs in the packed entry.
``inference_only`` is ``not torch.is_grad_enabled()``, as NeMo's own DTensor helper passes it.
"""

from __future__ import annotations

import torch

from harness.ranks.device import device_type
from harness.targets.nemo_rl import policy
from harness.targets.upstream import calls, megatron_stand_in, packing
from harness.targets.upstream.family import Entry, Family, Module, Option, Symbol, parameters
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.placeholders import Placeholder

MODEL_UTILS = "nemo_rl.distributed.model_utils"
PACKED = "from_parallel_logits_to_logprobs_packed_sequences"
SAMPLING = ("DistributedLogprobWithSampling", "ChunkedDistributedLogprobWithSampling")


def _inference_only() -> bool:
    return not torch.is_grad_enabled()


def _entropy(up, logits_3d, call):
    """NeMo's ``sum p log p`` per row, negated into the protocol's ``H``; ``[rows]``, gated by the caller's no_grad."""
    chunk = call.chunk_size if call.chunk_size is not None else max(int(logits_3d.shape[1]), 1)
    with torch.set_grad_enabled(call.entropy_grad and torch.is_grad_enabled()):
        negative = up.ChunkedDistributedEntropy.apply(logits_3d, chunk, call.group, _inference_only())
    return -negative.squeeze(0)


def token(up, call: calls.TokenCall):
    """``DistributedLogprob`` / ``ChunkedDistributedLogprob`` on the rows as ``B = 1`` (a view); the entropy
    ``ChunkedDistributedEntropy``'s ``sum p log p`` negated (a unit), its gradient gated as a NeMo caller gates it
    (computed under ``torch.no_grad()`` when not wanted)."""
    start, end = call.vocab_bounds
    batched, targets = call.logits.unsqueeze(0), call.targets.unsqueeze(0)
    if call.chunk_size is None:
        log_probs = up.DistributedLogprob.apply(batched, targets, start, end, call.group, _inference_only())
    else:
        log_probs = up.ChunkedDistributedLogprob.apply(
            batched, targets, start, end, call.chunk_size, call.group, _inference_only()
        )
    return log_probs.squeeze(0), (_entropy(up, batched, call) if call.with_entropy else None)


def packed(up, call: calls.PackedCall):
    """Called as NeMo's log-prob post-processor (``models/megatron/train.py``) calls it: the whole stream's
    unrolled tokens (NeMo rolls them), ``cu_seqlens_padded`` (``packing.py``), the end padding left out (a view);
    NeMo gathers CP and returns every sample on every rank, so this rank's zigzag view is picked. NeMo has no
    packed entropy: ``ChunkedDistributedEntropy`` on the local rows, each sample's response picked."""
    chunk = {} if call.chunk_size is None else {"chunk_size": call.chunk_size}
    fn = up.from_parallel_logits_to_logprobs_packed_sequences
    out, stream, cp, cp_rank = packing.call_packed_entry(
        fn, call, call.logits, inference_only=_inference_only(), **chunk
    )
    entropy = None
    if call.with_entropy:
        entropy = packing.per_sample_rows(_entropy(up, stream.unsqueeze(0), call), call.inputs, cp, cp_rank)
    return packing.per_sample_view(out, call.inputs, cp, cp_rank), entropy


def sampling(up, call: calls.SamplingCall):
    """``*LogprobWithSampling`` on the rows padded with zero logits (target 0) to a multiple of the TP size, as
    NeMo needs ``B * S``, the padding's outputs dropped; a chunk size rounded up to a multiple of the TP size (NeMo
    refuses others)."""
    kept = call.kept
    tp = call.tp[0]
    rows = call.logits.shape[0]
    pad = (-rows) % tp
    logits = torch.cat([call.logits, call.logits.new_zeros(pad, call.logits.shape[1])]) if pad else call.logits
    targets = torch.cat([call.targets, call.targets.new_zeros(pad)]) if pad else call.targets
    top_p = 1.0 if kept.top_p is None else kept.top_p
    batched, targets = logits.unsqueeze(0), targets.unsqueeze(0)
    if call.chunk_size is None:
        log_probs = up.DistributedLogprobWithSampling.apply(
            batched, targets, call.group, kept.top_k, top_p, _inference_only()
        )
    else:
        chunk = -(-call.chunk_size // tp) * tp
        log_probs = up.ChunkedDistributedLogprobWithSampling.apply(
            batched, targets, call.group, kept.top_k, top_p, chunk, _inference_only()
        )
    return log_probs.squeeze(0)[:rows], None


def hidden(up, call: calls.HiddenCall):
    """``ChunkedDistributedHiddenStatesToLogprobs`` on NeMo's sequence-first ``[S, B = 1, H]``, one rank."""
    start, end = call.vocab_bounds
    rows = call.hidden.shape[0]
    chunk = max(rows, 1) if call.chunk_size is None else call.chunk_size
    log_probs = up.ChunkedDistributedHiddenStatesToLogprobs.apply(
        call.hidden.unsqueeze(1), call.targets.unsqueeze(0), call.weight, start, end, chunk, call.group,
        _inference_only(),
    )  # fmt: skip
    return log_probs.squeeze(0).float(), None


def _chunking(up) -> bool:
    """Both logits paths take a chunk size: the chunked Function, and the packed entry point's parameter."""
    packed_entry = up.from_parallel_logits_to_logprobs_packed_sequences
    return up.ChunkedDistributedLogprob is not None and (
        packed_entry is None or "chunk_size" in parameters(packed_entry)
    )


def _cp_zigzag(up) -> bool:
    """The packed entry point takes a CP group, and the device is CUDA (see ``not_declared``)."""
    entry = up.from_parallel_logits_to_logprobs_packed_sequences
    return device_type() == "cuda" and entry is not None and "cp_group" in parameters(entry)


NEMO_RL = Family(
    name="nemo_rl",
    locate=Locate("nemo_rl", "nemo_rl/distributed/model_utils.py", "LPH_NEMO_RL_PATH"),
    modules={"model_utils": Module((MODEL_UTILS,))},
    symbols={
        name: Symbol("model_utils", (name,))
        for name in (
            "DistributedLogprob",
            "ChunkedDistributedLogprob",
            "ChunkedDistributedEntropy",
            PACKED,
            *SAMPLING,
            "ChunkedDistributedHiddenStatesToLogprobs",
        )
    },
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
            ("ChunkedDistributedHiddenStatesToLogprobs",),
            hidden,
            frozenset({"hidden"}),
            since="the fused LM head arrived with the chunked linear CE loss (#2036, 2026-03)",
            lacks={
                "entropy": "ChunkedDistributedHiddenStatesToLogprobs returns log-probs only",
                "entropy_gate": "as entropy",
            },
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
        Option("cp_zigzag", (_cp_zigzag,), "packed"),
        *policy.OPTIONS,
    ),
    placeholders=(
        megatron_stand_in.PLACEHOLDER,
        *(
            Placeholder(
                name,
                "imported at the top of model_utils.py from #2036 to #2648 (lazily since), for the "
                "linear CE fusion patch of GPTModel, never called here",
            )
            for name in ("megatron.core.models.gpt", "megatron.core.utils")
        ),
    ),
    not_declared={
        "cp_zigzag": "on a CPU device only: AllGatherCPTensor's backward moves its index to CUDA with .cuda() "
        "(since CP arrived, #704), so it is declared with LPH_DEVICE=cuda",
        "cp_allgather": "NeMo-RL has no DSA-style allgather context parallelism",
        "bshd": "its packed entry point is thd only",
        "response_only": "NeMo-RL evaluates every row",
        "loss_mask_only": "NeMo-RL evaluates every row",
        "temperature": "applied by NeMo's caller (its sampling parameters) before these Functions, outside them",
        "donation": "NeMo-RL never writes the gradient over the logits",
        "hidden_tp": "its hidden-state Function takes sequence-parallel hidden states and returns a sequence-sharded "
        "gradient, not the replicated hidden states of the protocol",
        "sampling_csr": "no given-K form: NeMo derives K on the trainer",
        "sampling_dense": "no given-K form: NeMo derives K on the trainer",
        "sampling_ties_all": "its top-p keeps the copies of a tied crossing value the mass needs, as vLLM does",
        "sampling_min_p": "TrainingSamplingParams has no min-p",
        "sampling_entropy": "its entropy is over the full vocabulary",
        "sampling_error": "a target outside K gets -inf (sampling_neg_inf)",
        "sampling_force_keep": "a target outside K gets -inf (sampling_neg_inf)",
        **policy.NOT_DECLARED,
    },
    expectations=("nemo_rl.toml",),
    prepare=policy.load,
    combinations=policy.combination_needs,
)
