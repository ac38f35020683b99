"""The SkyRL family (NovaSky-AI/SkyRL): ``skyrl==X`` or ``skyrl=PATH``.

SkyRL's token and hidden wrappers roll a sequence's tokens and drop its last position, which the protocol (a target
per row) cannot express without copying the logits: those entries call the Functions beneath them, with the
wrappers' chunk rule. The Megatron wrapper's steps are read from its source (``wrapper.py``).
"""

from __future__ import annotations

import torch

from harness.targets.skyrl import policy, wrapper
from harness.targets.upstream import calls, megatron_stand_in, packing
from harness.targets.upstream.family import Entry, Family, Module, Option, Symbol, on_cuda
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.shared_gradient import SumGradientOverGroup

PACKED = "from_parallel_logits_to_logprobs_packed_sequences"
TOKEN = ("DistributedLogprob", "ChunkedDistributedLogprob", "vocab_parallel_entropy")
LOSS = ("PolicyLossRegistry", policy.SCALES_ADVANTAGES)
SELF_REDUCING = ("PolicyLossRegistry", "reduce_loss")  # before #1296: each registry loss calls reduce_loss


def _prepare(up) -> None:
    """The wrapper's steps (None where its loss_func lacks one), the losses PolicyLossRegistry lists."""
    text = next((t for t in map(up.loader.read, wrapper.WRAPPER) if t is not None), None)
    up.wrapper = wrapper.read(text) if text is not None else None
    listed = getattr(up.PolicyLossRegistry, "list_available", None)
    up.config_fields = frozenset(listed()) if listed is not None else frozenset()


def _scaled(up, logits, temperature):
    return up.wrapper.scaled(logits, temperature) if temperature != 1.0 else logits


def _entropy(up, logits, enabled: bool):
    """SkyRL's per-row entropy (already ``-sum p log p``), its gradient under ``torch.set_grad_enabled(enabled)``."""
    with torch.set_grad_enabled(enabled and torch.is_grad_enabled()):
        return up.vocab_parallel_entropy(logits)


def token(up, call: calls.TokenCall):
    """SkyRL's ``[B, S]`` as ``B = 1`` (a view) with the per-row targets, the chunked Function where a chunk size
    is given; the temperature the wrapper's own division, the entropy ``vocab_parallel_entropy`` under its gate."""
    logits = _scaled(up, call.logits, call.temperature)
    start, end = call.vocab_bounds
    batched, targets = logits.unsqueeze(0), call.targets.unsqueeze(0)
    if call.chunk_size is None:
        log_probs = up.DistributedLogprob.apply(batched, targets, start, end, call.group, False)
    else:
        log_probs = up.ChunkedDistributedLogprob.apply(batched, targets, start, end, call.chunk_size, call.group, False)
    entropy = _entropy(up, batched, call.entropy_grad).squeeze(0) if call.with_entropy else None
    return log_probs.squeeze(0), entropy


def _packed(up, call: calls.PackedCall, gate: bool):
    """The packed entry point as the wrapper calls it: ``(out [B, U - 1], this rank's views, entropy under gate)``."""
    logits = _scaled(up, call.logits, call.temperature)
    fn = up.from_parallel_logits_to_logprobs_packed_sequences
    out, local, cp, rank = packing.call_packed_entry(fn, call, logits, inference_only=False, chunk_size=call.chunk_size)
    rows = _entropy(up, local, gate) if call.with_entropy else None
    entropy = None if rows is None else packing.per_sample_rows(rows, call.inputs, cp, rank)
    return out, packing.per_sample_view(out, call.inputs, cp, rank), entropy


def packed(up, call: calls.PackedCall):
    """Called as the wrapper calls it (``packing.py``: the whole stream's unrolled ids, ``cu_seqlens_padded``,
    the harness's end padding left out, a view); SkyRL returns every sequence on every CP rank, so this rank's
    zigzag view is picked. The entropy is ``vocab_parallel_entropy`` on the local rows under the wrapper's gate,
    each sample's response picked (SkyRL's packed entropy helper returns only a masked mean)."""
    return _packed(up, call, call.entropy_grad)[1:]


def _policy_loss(up, call: calls.PolicyCall, scales: bool):
    """The packed call, then SkyRL's registry loss on its output (``policy.py``), the entropy under the
    wrapper's gate for the loss's settings."""
    options = call.options or policy.PLAIN
    settings = policy.algorithm_settings(call, options)
    out, views, entropy = _packed(up, call, up.wrapper.grad_enabled(settings))
    return policy.policy_loss(up, call, options, settings, out, entropy, scales), views, entropy


def policy_loss(up, call: calls.PolicyCall):
    """Since #1296: the advantages pre-scaled by the reduction, the registry loss a masked sum."""
    return _policy_loss(up, call, scales=True)


def policy_loss_self_reducing(up, call: calls.PolicyCall):
    """Before #1296: the registry loss reduces itself (``reduce_loss`` by ``config.loss_reduction``)."""
    return _policy_loss(up, call, scales=False)


def hidden(up, call: calls.HiddenCall):
    """The fused head on ``B = 1``, its chunk the rows unless the chunk size is below them; under TP
    ``grad(hidden)`` is summed over the group (``SumGradientOverGroup``): the protocol's hidden states are
    replicated, SkyRL's trainer sums that gradient in its output processor's sequence-parallel gather."""
    start, end = call.vocab_bounds
    rows = call.hidden.shape[0]
    chunk = call.chunk_size if call.chunk_size is not None and call.chunk_size < rows else rows
    hidden_states = call.hidden if call.tp[0] == 1 else SumGradientOverGroup.apply(call.hidden, call.tp_group)
    log_probs = up.FusedLinearChunkedDistributedLogprob.apply(
        hidden_states.unsqueeze(0), call.weight, call.targets.unsqueeze(0), start, end, chunk, call.group, False
    )
    return log_probs.squeeze(0), None


def _takes_temperature(up) -> bool:
    """The Megatron wrapper's ``loss_func`` takes a ``temperature`` (``wrapper.py``), whose division the logits
    entries run."""
    return up.wrapper is not None and up.wrapper.takes_temperature


SKYRL = Family(
    name="skyrl",
    locate=Locate(
        "skyrl",
        "skyrl/backends/skyrl_train/distributed/megatron/model_utils.py",
        "LPH_SKYRL_PATH",
        pypi="skyrl",
        # until #1139 (2026-02-15) the trainer was the skyrl-train package (its Megatron code from 2025-09-05)
        older=(("skyrl-train", "skyrl_train/distributed/megatron/model_utils.py"),),
    ),
    modules={
        name: Module((f"skyrl.backends.skyrl_train.{path}", f"skyrl_train.{path}"))
        for name, path in (("model_utils", "distributed.megatron.model_utils"), ("ppo_utils", "utils.ppo_utils"))
    },
    symbols={
        **{name: Symbol("model_utils", (name,)) for name in (*TOKEN, PACKED, "FusedLinearChunkedDistributedLogprob")},
        **{
            name: Symbol("ppo_utils", (name,))
            for name in (*LOSS, "reduce_loss", "compute_approx_kl", "apply_off_policy_correction")
        },
    },
    entries=(
        Entry("token_log_probs", TOKEN, token, frozenset({"token", "entropy", "entropy_gate", "chunking"})),
        Entry(
            "packed_log_probs",
            (PACKED, "vocab_parallel_entropy"),
            packed,
            frozenset({"packed", "entropy", "entropy_gate", "chunking"}),
            since="the packed entry point arrived after the token-level Functions (and the buggy stand-in has none)",
        ),
        Entry(
            "policy_loss",
            (PACKED, "vocab_parallel_entropy", *LOSS, "wrapper"),
            policy_loss,
            frozenset({"policy_loss", "entropy"}),
            since="needs ppo_utils.py's PolicyLossRegistry, the packed entry point and the Megatron wrapper's "
            "loss_func (its entropy gate and term), which older SkyRL and the token-only stand-ins lack",
        ),
        Entry(
            "policy_loss",
            (PACKED, "vocab_parallel_entropy", *SELF_REDUCING, "wrapper"),
            policy_loss_self_reducing,
            frozenset({"policy_loss", "entropy"}),
            since="the self-reducing form (before #1296) needs the same packed entry point and wrapper",
        ),
        Entry(
            "hidden_log_probs",
            ("FusedLinearChunkedDistributedLogprob",),
            hidden,
            frozenset({"hidden", "hidden_tp", "chunking"}),
            since="the fused LM head arrived in SkyRL 0.3.0",
            lacks={
                "entropy": "SkyRL's fused entropy (_fused_vocab_parallel_entropy_from_hidden) is a no-grad metric by "
                "its docstring, and its wrapper raises NotImplementedError for use_entropy_loss with the fused head",
                "entropy_gate": "as entropy",
                "temperature": "from_parallel_hidden_to_logprobs divides the head by T, but it also rolls the labels "
                "and drops each sequence's last position, which the protocol (a target per row) cannot express "
                "without copying the hidden states; the Function beneath takes no temperature",
            },
        ),
    ),
    options=(
        Option("temperature", (_takes_temperature,), "token"),
        Option("cp_zigzag", (on_cuda(f"{PACKED}(cp_group)"),), "packed"),  # see not_declared
        *policy.OPTIONS,
    ),
    placeholders=(megatron_stand_in.PLACEHOLDER, *policy.PLACEHOLDERS),
    not_declared={
        "cp_zigzag": "on a CPU device only: the packed entry point's CP gather builds its backward's index with "
        "pin_memory=True and moves it with .cuda() (since its Megatron code arrived, #223), so it is declared with "
        "LPH_DEVICE=cuda",
        "cp_allgather": "SkyRL has no DSA-style allgather context parallelism",
        "bshd": "its packed entry point is thd",
        "response_only": "every row is evaluated",
        "loss_mask_only": "every row is evaluated",
        "donation": "SkyRL never writes the gradient over the logits",
        "policy_kl_k3": "SkyRL's k3 clamps the log-ratio to +-20 and the value to 10: the harness's low_var_kl",
    },
    expectations=("skyrl.toml", "skyrl-hidden.toml"),
    prepare=_prepare,
)
