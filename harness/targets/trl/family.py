"""TRL (huggingface/trl): ``trl==X`` or ``trl=PATH``.

``trl/trainer/utils.py`` imports the Hugging Face stack: its definitions are loaded alone, the kernels as modules.
On CPU tensors the helpers take their torch path; the Triton kernel they dispatch to on CUDA is ``triton_kernel``.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types

from harness.targets.trl import policy
from harness.targets.upstream import calls
from harness.targets.upstream.family import Entry, Family, Module, Option, Symbol, field_names
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.placeholders import Placeholder, absent_holding, holding
from harness.targets.upstream.whole_vocab import gather_vocabulary

UTILS = "trl/trainer/utils.py"
GRPO_TRAINER = "trl/trainer/grpo_trainer.py"
GRPO_CONFIG = "trl/trainer/grpo_config.py"
TOKEN = ("selective_log_softmax", "selective_log_softmax_and_entropy", "entropy_from_logits")
# On CPU tensors TRL's chunked LM head folds each tile with the torch twins of its kernels, about 3.5 ms per row
# (fp32, H 2, V 4: 14.5 s for 4096 rows, 115 s for 32768, TRL 1.15.0): a thousand 256-row blocks would take a
# quarter of an hour per call.
CPU_CASE_LIMITS = {"max_hidden_rows": 16_384}
PLACEHOLDERS = (
    Placeholder(
        "transformers",
        "imported by the kernels and the helpers for the names below; a recent version, which TRL 0.18-0.20's "
        "GRPOConfig body compares to choose where an argument-parser field the loss never reads is listed (its newer "
        "branch: the base's list, which the stand-in base holds)",
        absent_holding(__version__="5.0.0"),
        scope="call",
    ),
    Placeholder(
        "transformers.utils",
        "is_triton_available (whether triton imports) and the fused forward's ModelOutput",
        holding(  # the other probes are read only by module-level branches the loader never runs
            is_triton_available=lambda: importlib.util.find_spec("triton") is not None,
            is_peft_available=lambda: False,
            is_rich_available=lambda: False,
            ModelOutput=type("ModelOutput", (), {}),  # the base of the fused forward's output dataclass
        ),
        scope="call",
    ),
    Placeholder(
        "transformers.integrations.deepspeed",
        "is_deepspeed_zero3_enabled, asked by maybe_gather_lm_head_ctx: no DeepSpeed here",
        holding(is_deepspeed_zero3_enabled=lambda: False),
        scope="call",
    ),
)


def _prepare(up) -> None:
    """The definitions taken alone from the trainer's files (None where the revision lacks one), bound as TRL's own
    module binds them: ``_fused_logprob_entropy`` and ``_ChunkedLogProbFunction`` from its kernels."""
    up.read_from = {**dict.fromkeys(TOKEN, UTILS), "add_fused_lm_head": UTILS}
    up.read_from["compute_loss"] = f"{GRPO_TRAINER} (GRPOTrainer._compute_loss)"
    fused, chunked = up.modules["fused"], up.modules["chunked"]
    kernels = {
        "_fused_logprob_entropy": getattr(fused, "selective_log_softmax_and_entropy", None),
        "_ChunkedLogProbFunction": up.ChunkedLogProbFunction,
        "_use_triton": getattr(chunked, "_use_triton", None),
    }
    alone = up.loader.symbol_if_present
    for name in TOKEN:
        setattr(up, name, alone(UTILS, name, stand_ins=kernels))
    up.add_fused_lm_head = alone(UTILS, "add_fused_lm_head", stand_ins=kernels) if chunked is not None else None
    if chunked is not None:  # its backward imports maybe_gather_lm_head_ctx from ..trainer.utils after the call
        gather_context = alone(UTILS, "maybe_gather_lm_head_ctx")

        @functools.wraps(gather_context)
        def in_context(*params):  # TRL's own, run in the calling context
            with up.loader.present():
                return gather_context(*params)

        view = holding(maybe_gather_lm_head_ctx=in_context)("trl.trainer.utils")
        up.loader.modules[view.__name__] = sys.modules[view.__name__] = view  # where that import finds it then
    helpers = {name: found for name in ("nanmin", "nanmax") if (found := alone(UTILS, name)) is not None}  # metrics
    up.compute_loss = up.loader.method_if_present(GRPO_TRAINER, "GRPOTrainer", "_compute_loss", stand_ins=helpers)
    up.unpacks = policy.unpacked(up.compute_loss, "_get_per_token_logps_and_entropies") if up.compute_loss else None
    base = type("TrainingArguments", (), {"_VALID_DICT_FIELDS": []})  # as far as a TRL config's class body reads it
    # The config's base from its own module: BaseConfig in 0.29, _BaseConfig from 1.0
    bases = dict.fromkeys(("_BaseConfig", "BaseConfig", "TrainingArguments"), base)
    config = alone(GRPO_CONFIG, "GRPOConfig", stand_ins=bases)
    up.config_fields = field_names(config)


def token(up, call: calls.TokenCall):
    """``selective_log_softmax_and_entropy`` (TRL >= 1.14), the composition TRL's trainers call, with its
    temperature division and entropy gate; ``selective_log_softmax`` alone where no entropy is asked for, as the
    trainers call it then. The targets are TRL's ``index`` (already shifted)."""
    whole = gather_vocabulary(call.logits, call.tp_group)
    if not call.with_entropy:
        return up.selective_log_softmax(whole, call.targets, temperature=call.temperature), None
    return up.selective_log_softmax_and_entropy(
        whole, call.targets, entropy_requires_grad=call.entropy_grad, temperature=call.temperature
    )


def token_before_1_14(up, call: calls.TokenCall):
    """TRL < 1.14: ``selective_log_softmax`` and, from 0.20, ``entropy_from_logits``, each as it is: their
    trainer divided by the temperature and gated the entropy in its own method, so neither is declared."""
    whole = gather_vocabulary(call.logits, call.tp_group)
    log_probs = up.selective_log_softmax(whole, call.targets)
    return log_probs, (up.entropy_from_logits(whole) if call.with_entropy else None)


class _LanguageModel:
    """The model ``add_fused_lm_head`` patches: its backbone answers with the protocol's ``hidden`` as the last
    hidden state ``[1, rows, H]`` (a view), its output embedding is the head (no bias), its config has no softcap
    and no logit scale."""

    def __init__(self, hidden, weight):
        head = types.SimpleNamespace(weight=weight, bias=None)
        self.config = types.SimpleNamespace(get_text_config=lambda: self.config)
        self.base_model = lambda *args, **kwargs: types.SimpleNamespace(last_hidden_state=hidden.unsqueeze(0))
        self.get_output_embeddings = lambda: head

    def forward(self, *args, **kwargs):
        raise NotImplementedError("the harness calls the fused forward only (fused_lm_head=True)")


def hidden(up, call: calls.HiddenCall):
    """TRL's fused forward: ``add_fused_lm_head(model, temperature, outputs=...)``, then ``model(fused_lm_head=True,
    shift_labels=...)``: the protocol's targets are already shifted, which is what ``shift_labels`` means to it."""
    model = _LanguageModel(call.hidden, call.weight)
    outputs = ("log_probs", "entropy") if call.with_entropy else ("log_probs",)
    up.add_fused_lm_head(model, temperature=call.temperature, outputs=outputs)
    out = model.forward(fused_lm_head=True, shift_labels=call.targets.unsqueeze(0))
    return out.log_probs.squeeze(0), (out.entropy.squeeze(0) if call.with_entropy else None)


TRL = Family(
    name="trl",
    locate=Locate("trl", UTILS, "LPH_TRL_PATH", pypi="trl"),
    modules={"fused": Module(("trl.kernels.logprob_entropy",)), "chunked": Module(("trl.kernels.chunked_logprob",))},
    symbols={"ChunkedLogProbFunction": Symbol("chunked", ("ChunkedLogProbFunction",))},
    entries=(
        Entry(
            "token_log_probs",
            ("selective_log_softmax_and_entropy", "selective_log_softmax"),
            token,
            frozenset({"token", "entropy", "entropy_gate", "temperature"}),
        ),
        Entry("token_log_probs", ("selective_log_softmax",), token_before_1_14, frozenset({"token"})),
        Entry(
            "hidden_log_probs",
            ("add_fused_lm_head", "ChunkedLogProbFunction"),
            hidden,
            frozenset({"hidden", "entropy", "temperature"}),
            since="the fused LM head (add_fused_lm_head, trl/kernels/chunked_logprob.py) arrived in TRL 1.15",
            lacks={
                "entropy_gate": "ChunkedLogProbFunction has no switch: a trainer that wants a graph-free entropy "
                "detaches it itself"
            },
        ),
        Entry("token_policy_loss", ("compute_loss",), policy.token_policy_loss, frozenset({"token_policy_loss"})),
    ),
    options=(Option("entropy", ("entropy_from_logits",), "token"), *policy.OPTIONS),
    placeholders=PLACEHOLDERS,
    not_declared={
        "chunking": "selective_log_softmax_and_entropy fixes entropy_from_logits' row chunk at its default and "
        "selective_log_softmax has none; the chunked LM head's chunk is a vocabulary width, not rows",
        "packed": "TRL's trainers pad to [B, T] and mask; the protocol's packed layouts are Megatron's",
        "hidden_tp": "TRL never shards the LM head by vocabulary (FSDP's DTensor head is gathered whole first)",
        "vocab_parallel": "TRL does not shard the vocabulary: under TP a trainer gathers the shards first "
        "(harness/targets/upstream/whole_vocab.py), so what TP ranks disagree on never reaches TRL's code",
        **policy.NOT_DECLARED,
    },
    expectations=("trl.toml",),
    prepare=_prepare,
    triton=True,
    cpu_case_limits=CPU_CASE_LIMITS,
)


def kernel_token(up, call: calls.TokenCall):
    log_probs, entropy = up.kernel(
        gather_vocabulary(call.logits, call.tp_group), call.targets, temperature=call.temperature
    )
    return log_probs, entropy if call.with_entropy else None


TRL_TRITON = Family(
    name="trl",
    locate=TRL.locate,
    modules={"fused": TRL.modules["fused"]},
    symbols={"kernel": Symbol("fused", ("selective_log_softmax_and_entropy",))},
    entries=(Entry("token_log_probs", ("kernel",), kernel_token, frozenset({"token", "entropy", "temperature"})),),
    placeholders=PLACEHOLDERS,
    not_declared={
        "entropy_gate": "the kernel always builds the entropy's graph; the detach is the utils wrapper's",
        "chunking": "no chunk argument",
        "vocab_parallel": TRL.not_declared["vocab_parallel"],
    },
    triton=True,
)


def triton_kernel(where=None):
    """TRL's Triton kernel alone (``harness.targets.trl.family:triton_kernel``): what the helpers dispatch to on
    CUDA, under Triton's interpreter on a CPU."""
    return TRL_TRITON.target(where)
