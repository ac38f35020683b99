"""The verl family: verl composes its log-probs in its Megatron engine, so the entries call the engine's own steps
(never built: ``self`` is ``Engine``, the model ``engine.RowsModel``); stand-ins written from upstream SIGNATURES.
"""

from __future__ import annotations

import ast
import dataclasses
import dis
import functools
import logging

import torch
from torch.nn.functional import pad

from harness.targets.upstream import calls
from harness.targets.upstream.family import Entry, Family, Method, Module, Option, Symbol, accepted, parameters
from harness.targets.upstream.loader import MissingUpstream
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.settings import StrictSettings
from harness.targets.verl import engine as verl_engine
from harness.targets.verl import padding as verl_padding
from harness.targets.verl.stand_ins import PLACEHOLDERS

ENGINE = "verl/workers/engine/megatron/transformer_impl.py"
ENGINE_BEFORE_3422 = "verl/workers/engine/megatron/engine_impl.py"  # the engine's file 2025-08-28..09-09
ROLLOUT_WEIGHTS = "verl/trainer/ppo/rollout_corr_helper.py", "compute_rollout_correction_weights"
# the processor's keywords the engine binds alike for every call (its other outputs off)
SETTINGS = {"logits_processor_func": None, "batch": None, "data_format": "thd"} | dict.fromkeys(
    ("calculate_sum_pi_squared", "distillation_use_topk", "distillation_only"), False
)


class Engine(StrictSettings):  # the processor's self: its engine config only
    READ_AS = "verl MegatronEngineWithLMHead"
    MAPPED_IN = "harness/targets/verl/family.py (_processor)"


class EngineConfig(Engine):
    READ_AS = "verl engine config"


def _prepare(up) -> None:
    """Per revision: util.py's logger as a verl process has it; the trainer's rollout weights loaded alone; the
    processor's form (a method, or an older revision's closure over forward_step's locals, each mapped, or an ERROR)."""
    util, verl_F = up.modules["util"], up.modules["torch_functional"]  # noqa: N806  (the name verl imports it by)
    if util is not None:
        _warning_once(vars(util))
    verl_padding.bind_flash_attn(up.modules["padding"])
    up.rollout_weights = None
    if verl_F is not None:
        up.rollout_weights = up.loader.symbol_if_present(*ROLLOUT_WEIGHTS, stand_ins={"verl_F": verl_F})
    up.takes_batch_size = verl_engine.TAKES_BATCH_SIZE(up)  # agg_loss takes global_batch_size (#4211 on): engine.loss
    processor = up.logits_processor
    up.closes_over_temperature = up.label_is_input_ids = False  # the closure's forms, read below where it serves
    if processor is None and up.logits_closure is not None:
        unmapped = set(up.logits_closure.free) - {"self", "calculate_entropy", "temperature", *SETTINGS}
        if unmapped:
            raise MissingUpstream(
                f"{ENGINE}: forward_step's logits_processor reads {sorted(unmapped)}, which the verl record does "
                "not map (harness/targets/verl/family.py, SETTINGS)"
            )
        processor = up.logits_closure(**dict.fromkeys(up.logits_closure.free))
        _warning_once(processor.__globals__)  # 2025-09..11 closures warn through the engine file's logger
        # 2025-10..2026-01: the closure divides by forward_step's local, the batch's one float (never an argument)
        up.closes_over_temperature = "temperature" in up.logits_closure.free
        # 2025-10-13..11-24 (#3600 to #4250): the closure rolls its label (forward_step's input_ids.clone()) itself,
        # the only rebinding of label in any engine revision's closure since 2025-08 (each one read)
        up.label_is_input_ids = any(
            op.opname == "STORE_FAST" and op.argval == "label" for op in dis.get_instructions(processor)
        )
    up.takes_temperature = processor is not None and "temperature" in parameters(processor)
    up.processor_arguments = processor_arguments(up.forward_step)
    if up.takes_temperature and up.expand_as_nested is None:
        raise MissingUpstream(f"{up.root}: no expand_as_nested in verl/utils/torch_functional.py (the engine's)")


def _warning_once(namespace: dict) -> None:
    """The ``logger`` of ``namespace`` with the ``warning_once`` transformers adds to every Logger in a verl process
    (an lru_cache over warning)."""
    if isinstance(namespace.get("logger"), logging.Logger):
        namespace["logger"] = logging.LoggerAdapter(namespace["logger"], {})
        namespace["logger"].warning_once = functools.cache(namespace["logger"].warning)


# what forward_step puts in logits_processor_args beside the label and temperature, and what the adapter gives:
# the loss mask per position (#4981, 2026-01-29 on; the engine forward pops it unread outside MTP training, and
# until #5204 required it), and the response attention mask (forward_step's None where the loss mask is nested)
_UNREAD = ("loss_mask", "response_attention_mask")
# the ones the entries give as the processor reads them: the label, the temperature (where the processor takes it)
# and, before #3600 (2025-10-13), the label mask (all True: every row one the engine evaluates; see token)
_MAPPED = ("label", "temperature", "label_mask")


def processor_arguments(forward_step: ast.FunctionDef | None) -> frozenset:
    """The keys of the dict literal forward_step assigns to ``logits_processor_args`` (how the trainer's engine
    builds the processor's arguments); a key the record does not map is an ERROR naming it."""
    keys = {
        key.value
        for node in (ast.walk(forward_step) if forward_step is not None else ())
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id == "logits_processor_args"
        for key in node.value.keys
        if isinstance(key, ast.Constant)
    }
    unmapped = keys - {*_MAPPED, *_UNREAD}
    if unmapped:
        raise MissingUpstream(
            f"{ENGINE}: forward_step passes the logits processor {sorted(unmapped)}, which the verl record does not "
            "map (harness/targets/verl/family.py, _MAPPED and _UNREAD)"
        )
    return frozenset(keys)


def _processor(up, call):
    """verl's logits processor as the engine binds it (the method's ``functools.partial``, or the closure)."""
    if call.temperature != 1.0 and not _takes_temperature(up):  # declared by the hidden path, not this one
        raise ValueError(f"temperature={call.temperature}: this revision's logits processor takes no temperature")
    chunking = {"entropy_from_logits_with_chunking": call.chunk_size is not None}
    engine = Engine(engine_config=EngineConfig(**chunking, entropy_from_logits_chunk_size=call.chunk_size))
    settings = {**SETTINGS, "calculate_entropy": call.with_entropy}
    if up.logits_processor is None:
        bound = {"self": engine, "temperature": float(call.temperature), **settings}
        return up.logits_closure(**{name: bound[name] for name in up.logits_closure.free})
    return functools.partial(up.logits_processor, engine, **accepted(up.logits_processor, **settings))


def token(up, call: calls.TokenCall):
    """verl's processor on ``[1, rows, V_local]``, a view of the job's copy (verl divides it in place, a write the
    inputs-unmutated check must see), one float32 temperature per row, the entropy chunked by ``chunk_size``. An
    older closure gets an all-True ``label_mask``, or the input ids whose next tokens are the targets where it rolls
    its label itself (forward_step's ``input_ids.clone()``)."""
    logits = call.logits.unsqueeze(0)
    temperature = torch.full(logits.shape[:2], float(call.temperature), dtype=torch.float32, device=logits.device)
    targets, processor = call.targets.unsqueeze(0), _processor(up, call)
    if "label_mask" in parameters(processor):  # before #3600 (2025-10): every row is one the engine evaluates
        targets = (targets, torch.ones_like(targets, dtype=torch.bool))
    elif up.label_is_input_ids:  # the input ids whose next tokens are the targets, as forward_step passes them
        targets = (torch.roll(targets, 1, dims=1),)
    else:
        targets = (targets, *([temperature] if up.takes_temperature else []))
    out = processor(logits, *targets)
    return out["log_probs"][0], (out["entropy"][0] if call.with_entropy else None)


def _forward(up, call: calls.PackedCall) -> dict:
    inputs, logits, device = call.inputs, call.logits, call.logits.device
    verl_engine.checked(inputs, logits, call.cp_group)
    input_ids = verl_engine.row_ids(inputs, call.cp[0], logits.shape[0], device)
    label = [t.to(device=device, dtype=torch.long) for t in inputs.tokens]
    arguments = {"label": torch.nested.as_nested_tensor(label, layout=torch.jagged)}
    if up.takes_temperature:  # one per sample, expanded per token by verl's own helper (forward_step's)
        per_sample = torch.full((len(inputs.tokens),), float(call.temperature), dtype=torch.float32, device=device)
        arguments["temperature"] = up.expand_as_nested(per_sample, input_ids)
    if "label_mask" in up.processor_arguments:  # every row is one the engine evaluates (as token)
        arguments["label_mask"] = torch.nested.as_nested_tensor(
            [torch.ones_like(t, dtype=torch.bool) for t in label], layout=torch.jagged
        )
    if "loss_mask" in up.processor_arguments:  # each position's: does it predict a response token
        arguments["loss_mask"] = verl_engine.response_positions(inputs, device)
    if "response_attention_mask" in up.processor_arguments:
        arguments["response_attention_mask"] = None
    model, processor = verl_engine.RowsModel(logits, call.cp_group), _processor(up, call)
    # data_format since #4323 (2025-12-02; before, the no-padding forward was THD only), cp_layout where it is taken
    layout = accepted(up.engine_forward, cp_layout=verl_engine.VERL_LAYOUTS[inputs.cp_mode], data_format="thd")
    processing = {"logits_processor": processor, "logits_processor_args": arguments}
    return up.engine_forward(model, input_ids, {}, **processing, **layout)


def packed(up, call: calls.PackedCall):
    """The engine forward as ``forward_step`` calls it (``label``: its ``input_ids.clone()``; the temperature per
    sample, expanded by verl's ``expand_as_nested``; the other arguments it builds, ``processor_arguments``), its
    per-position output read as this CP rank's zigzag views."""
    if not call.inputs.tokens:
        return [], ([] if call.with_entropy else None)
    return verl_engine.views(_forward(up, call), call, call.cp_group)


def policy_loss(up, call: calls.PolicyCall):
    """``ppo_loss`` on the packed forward's output and the trainer's left-right batch, after verl's own padding step
    where the revision has it (``engine.py``); under CP verl's loss reads the gathered batch (the per-sample vectors
    gathered from the views), each rank's share the value / ``cp`` with verl's gradient."""
    inputs, options, cp = call.inputs, call.options, call.cp[0]
    out, width = _forward(up, call), max((int(r) for r in inputs.response_lengths), default=0)

    def matrix(values: list[torch.Tensor]) -> torch.Tensor:  # [B, width], each row a sample's values then zeros
        rows = [pad(v, (0, width - v.numel())) for v in values]
        return torch.stack(rows) if rows else torch.zeros(0, width)

    def padded(values, name):  # the call's per-sample vectors (under CP: this rank's views, made whole)
        if values is None:
            return None
        if cp > 1:
            values = verl_engine.whole(values, inputs, call.cp_group, name)
        return matrix([v.detach().to(torch.float32) for v in values])

    vectors = {name: padded(getattr(call, name), name) for name in ("advantages", "old_log_probs")}
    if options is not None:
        options = dataclasses.replace(
            options, **{name: padded(getattr(options, name), name) for name in ("ref_log_probs", "rollout_log_probs")}
        )
    lengths = [(int(t), int(r)) for t, r in zip(inputs.total_lengths, inputs.response_lengths)]
    mask = matrix([m.float() for m in inputs.loss_masks])
    loss = verl_engine.loss(up, call.replace(**vectors, options=options), out, lengths, mask)
    if cp > 1:  # each rank's loss is the whole batch's; its share (the harness's convention) keeps that gradient
        loss = loss - loss.detach() * (1 - 1 / cp)
    return (loss, *verl_engine.views(out, call, None))


def token_policy_loss(up, call: calls.TokenPolicyCall):
    """``ppo_loss`` on ``[B, R]`` matrices (``engine.py``), each row a sequence with a one-token prompt's response.

    From #3600 ppo_loss takes the engine's output, nested per sequence, per position (position p: token p + 1) and
    pads it to ``[B, R]`` itself (``no_padding_2_padding``); before, it took the ``[B, R]`` matrices as they are."""
    rows, width = call.log_probs.shape
    matrices = {key: m for key, m in (("log_probs", call.log_probs), ("entropy", call.entropy)) if m is not None}
    if up.no_padding_2_padding is not None:  # nested per sequence, as the engine returns it
        offsets = torch.arange(0, rows * (width + 1) + 1, width + 1, device=call.log_probs.device)
        matrices = {
            key: torch.nested.nested_tensor_from_jagged(pad(matrix, (0, 1)).reshape(-1), offsets=offsets)
            for key, matrix in matrices.items()
        }
    return verl_engine.loss(up, call, matrices, [(width + 1, width)] * rows, call.loss_mask)


def hidden(up, call: calls.HiddenCall):
    """``FusedLinearForPPO(chunk_size)`` as a module (all rows one chunk when None); its entropy only if asked."""
    chunk = max(call.hidden.shape[0], 1) if call.chunk_size is None else call.chunk_size  # 0, negatives: as given
    log_probs, entropy = up.FusedLinearForPPO(chunk_size=chunk)(
        call.hidden, call.weight, call.targets.to(call.hidden.device), float(call.temperature)
    )
    return log_probs, (entropy if call.with_entropy else None)


# ---- the record ---------------------------------------------------------------------------------
_PROCESSOR = (
    "verl's Megatron engine (workers/engine/megatron/engine_impl.py, #3235, 2025-08; transformer_impl.py since "
    "#3422) and its logits processor "
    "(a closure in forward_step; the method _lm_head_logits_processor since #6848) are not in this revision"
)
_ENGINE_FORWARD = f"{_PROCESSOR}, or not its engine forward (gptmodel_forward_no_padding since #3600, 2025-10)"
_LOSS = f"{_ENGINE_FORWARD}, or not its ppo_loss (workers/utils/losses.py)"
_PPO = "verl's actor loss ppo_loss arrived with its Megatron engine (#3235, 2025-08)"


def _entry(serves: str, symbols: tuple, translate, brings: str, since: str | None = None) -> Entry:
    return Entry(serves, symbols, translate, frozenset(brings.split()), since)


def _forms(serves: str, more: tuple, translate, brings: str, since: str) -> tuple[Entry, Entry]:
    """The entry through the current processor (required), then through an older revision's closure (``since``)."""
    current = _entry(serves, ("logits_processor", *more), translate, brings)
    return current, _entry(serves, ("logits_closure", *more), translate, brings, since)


def _takes_temperature(up) -> bool:
    """The revision's logits processor divides by a ``temperature``: its argument, or an older closure's local (before
    either, the engine divided outside these entries)."""
    return up.takes_temperature or up.closes_over_temperature


VERL = Family(
    name="verl",
    locate=Locate("verl", "verl/utils/megatron/tensor_parallel.py", "LPH_VERL_PATH", pypi="verl"),
    modules={
        "tensor_parallel": Module(("verl.utils.megatron.tensor_parallel",)),
        "util": Module(("verl.models.mcore.util",)),
        "model_forward": Module(("verl.models.mcore.model_forward",)),
        "torch_functional": Module(("verl.utils.torch_functional",)),
        "core_algos": Module(("verl.trainer.ppo.core_algos",)),
        # verl's actor losses lived in workers/roles/utils/ until #4352 (2025-11): an older form, not a skip
        "losses": Module(("verl.workers.utils.losses", "verl.workers.roles.utils.losses")),
        "padding": Module(("verl.workers.utils.padding", "verl.workers.roles.utils.padding")),
        "attention_utils": Module(("verl.utils.attention_utils",)),
        "fused": Module(("verl.utils.experimental.torch_functional",)),
    },
    symbols={
        "logits_processor": Method((ENGINE,), "MegatronEngineWithLMHead", "_lm_head_logits_processor"),
        # before verl #6848 (2026-07): a closure over forward_step's locals (an older form, not a skip)
        "logits_closure": Method(
            (ENGINE, ENGINE_BEFORE_3422), "MegatronEngineWithLMHead", "forward_step", inner="logits_processor"
        ),
        # forward_step parsed, never run: the processor's arguments it builds (processor_arguments)
        "forward_step": Method((ENGINE, ENGINE_BEFORE_3422), "MegatronEngineWithLMHead", "forward_step", read=True),
        "engine_forward": Symbol("model_forward", ("gptmodel_forward_model_engine", "gptmodel_forward_no_padding")),
        "vocab_parallel_entropy_with_chunking": Symbol("tensor_parallel", ("vocab_parallel_entropy_with_chunking",)),
        "expand_as_nested": Symbol("torch_functional", ("expand_as_nested",)),
        # read by the options (ppo_loss imports them)
        **{name: Symbol("core_algos", (name,)) for name in ("get_policy_loss_fn", "agg_loss", "kl_penalty")},
        "ppo_loss": Symbol("losses", ("ppo_loss",)),
        # from #3600 (2025-10-13) ppo_loss pads the engine's per-position output itself (its module imports this)
        # (2025-11-29..2026-02-04, #4352 to #5115: its own _slice_response_from_unpad_output, the same step)
        "no_padding_2_padding": Symbol("losses", ("no_padding_2_padding", "_slice_response_from_unpad_output")),
        # the trainer's step before every ppo_loss from #3600: the left-right padded batch to the no-padding form
        "left_right_2_no_padding": Symbol("padding", ("left_right_2_no_padding",)),
        # verl's own CPU padding helpers (7bc80c00a, 2026-08): where absent, the harness gives flash-attn's
        "padding_fallback": Symbol("attention_utils", ("_fallback_unpad_input",)),
        "FusedLinearForPPO": Symbol("fused", ("FusedLinearForPPO",)),
    },
    entries=(
        *_forms("token_log_probs", (), token, "token entropy", _PROCESSOR),
        *_forms("packed_log_probs", ("engine_forward",), packed, "packed entropy cp_zigzag", _ENGINE_FORWARD),
        *_forms("policy_loss", ("engine_forward", "ppo_loss"), policy_loss, "policy_loss entropy cp_zigzag", _LOSS),
        _entry("token_policy_loss", ("ppo_loss",), token_policy_loss, "token_policy_loss token_policy_entropy", _PPO),
        _entry("hidden_log_probs", ("FusedLinearForPPO",), hidden, "hidden entropy chunking temperature"),
    ),
    options=(
        # the processor reads the engine config's entropy chunk where its file has the chunked entropy (#6446)
        *(Option("chunking", ("vocab_parallel_entropy_with_chunking",), level) for level in ("token", "packed")),
        *(Option("temperature", (_takes_temperature,), level) for level in ("token", "packed", "policy_loss")),
        Option("cp_allgather", ("engine_forward(cp_layout)",), "packed"),
        # each extends token_policy_loss: both policy entries run the same composition (engine.loss)
        *(Option(capability, (when,), "token_policy_loss") for capability, when in verl_engine.DECLARED_BY.items()),
    ),
    placeholders=PLACEHOLDERS,
    not_declared={
        "entropy_gate": "verl's logits processor has no gate: its entropy keeps a graph whenever computed (its "
        "callers compute reference and old log-probs under no_grad, which the forward-only check runs)",
        "bshd": "the engine's bshd path (data_format='bshd', preprocess_bshd_engine) is not mapped",
        **dict.fromkeys(("response_only", "loss_mask_only"), "verl evaluates every row"),
        "donation": "verl never writes the gradient over the logits",
        "hidden_tp": "the torch fused LM head takes the whole head (verl's TP kernel, verl/utils/kernel/, asserts "
        "CUDA tensors and uses CUDA streams: not reachable on a CPU run)",
        "policy_gspo_dual_clip": "verl's GSPO has no dual clip",
        "policy_kl_k3": "verl's k3 is the clamped low_var_kl (declared as policy_kl_low_var_kl)",
        "policy_kl_ratio_weighted": "verl's KL loss term is not weighted by the ratio",
        "policy_tis_floor": "verl's TIS has a cap only",
        **dict.fromkeys(("policy_tis_geometric", "policy_mis_geometric"), "verl has no geometric-mean rollout weight"),
        **{
            f"policy_rs_{level}": "verl's rollout_rs edits the response mask; the harness's RS does not"
            for level in ("token", "sequence", "geometric")
        },
        "policy_rs_floor": "as policy_rs_token",
    },
    expectations=("verl.toml", "verl-hidden.toml"),
    prepare=_prepare,
    context=verl_padding.calling,
)
