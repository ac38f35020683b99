"""The verl family (verl-project/verl): ``verl==X`` or ``verl=PATH``; what each entry calls and translates is on
the generated page (docs/records/families/verl.md).

verl composes its log-probs in its Megatron engine, not in a library function (temperature division in place,
entropy on the divided logits after a ``clone()`` backup, log-probs from the backup; around it ``forward_step``'s
packing, CP split, label roll and CP gather). The entries call those, the engine never built (``self`` holds the
config it reads, ``stand_ins.engine``; the model is the harness's logits, ``packed.RowsModel``), so a revision is
checked as it composes its steps.
"""

from __future__ import annotations

import functools

import torch

from harness.targets.upstream import calls, packing
from harness.targets.upstream.family import Entry, Family, Method, Module, Option, Symbol, accepted, parameters
from harness.targets.upstream.loader import MissingUpstream
from harness.targets.upstream.locate import Locate
from harness.targets.verl import packed as verl_packed
from harness.targets.verl import policy as verl_policy
from harness.targets.verl import stand_ins

ENGINE = "verl/workers/engine/megatron/transformer_impl.py"
PROCESSOR_FLAGS = ("calculate_sum_pi_squared", "distillation_use_topk", "distillation_only")


def _prepare(up) -> None:
    """Per revision: util.py's logger as a verl process has it; the rollout weights' function, loaded alone; the
    processor's form (a method, or an older revision's closure over forward_step's locals, each of which the
    record maps, or the load is an ERROR naming it)."""
    if up.modules["util"] is not None:
        stand_ins.logger_once(up.modules["util"])
    up.rollout_weights = verl_policy.rollout_weights(up)
    processor = up.logits_processor
    if processor is None and up.logits_closure is not None:
        unmapped = set(up.logits_closure.free) - set(_settings(None, True))
        if unmapped:
            raise MissingUpstream(
                f"{ENGINE}: forward_step's logits_processor reads {sorted(unmapped)}, which the verl record does "
                "not map (harness/targets/verl/family.py, _settings)"
            )
        processor = up.logits_closure(**dict.fromkeys(up.logits_closure.free))
    up.takes_temperature = processor is not None and "temperature" in parameters(processor)
    if up.takes_temperature and up.expand_as_nested is None:
        raise MissingUpstream(f"{up.root}: no expand_as_nested in verl/utils/torch_functional.py (the engine's)")


def _settings(chunk_size, with_entropy: bool) -> dict:
    return {
        "self": stand_ins.engine(chunk_size),
        "calculate_entropy": with_entropy,
        **dict.fromkeys(PROCESSOR_FLAGS, False),
        "logits_processor_func": None,
        "batch": None,
        "data_format": "thd",
    }


def _processor(up, call):
    """verl's logits processor as the engine binds it: the method's ``functools.partial``, or the closure."""
    if call.temperature != 1.0 and not up.takes_temperature:  # declared by the hidden path, not this one
        raise ValueError(f"temperature={call.temperature}: this revision's logits processor takes no temperature")
    settings = _settings(call.chunk_size, call.with_entropy)
    if up.logits_processor is None:
        return up.logits_closure(**{name: settings[name] for name in up.logits_closure.free})
    engine = settings.pop("self")
    return functools.partial(up.logits_processor, engine, **accepted(up.logits_processor, **settings))


def token(up, call: calls.TokenCall):
    """verl's processor on ``[1, rows, V_local]``, a view of what the job hands (a copy already,
    ``harness.jobs.inputs``: verl divides the model output in place, and a clone here would hide that write from the
    inputs-unmutated check), the temperature one float32 per row as the engine expands it, ``calculate_entropy`` the
    call's ``with_entropy``, the entropy's chunk the call's ``chunk_size`` (verl chunks the entropy only), the other
    outputs (sum of squared probabilities, distillation) off."""
    logits = call.logits.unsqueeze(0)
    arguments = [logits, call.targets.unsqueeze(0)]
    if up.takes_temperature:
        arguments.append(
            torch.full(logits.shape[:2], float(call.temperature), dtype=torch.float32, device=logits.device)
        )
    out = _processor(up, call)(*arguments)
    entropy = out["entropy"][0] if call.with_entropy else None
    return out["log_probs"][0], entropy


def _forward(up, call: calls.PackedCall) -> dict:
    """verl's engine forward on the harness's rows: per output, the samples' sequences (gathered over CP)."""
    inputs, logits = call.inputs, call.logits
    verl_packed.checked(inputs, logits, call.cp_group)
    cp, device = call.cp[0], logits.device
    input_ids = verl_packed.row_ids(inputs, cp, logits.shape[0], device)
    arguments = {"label": verl_packed.nested([t.to(device=device, dtype=torch.long) for t in inputs.tokens])}
    if up.takes_temperature:  # one per sample, expanded per token by verl's own helper (forward_step's)
        per_sample = torch.full((len(inputs.tokens),), float(call.temperature), dtype=torch.float32, device=device)
        arguments["temperature"] = up.expand_as_nested(per_sample, input_ids)
    layout = {"cp_layout": verl_packed.VERL_LAYOUTS[inputs.cp_mode]}
    return up.engine_forward(
        verl_packed.RowsModel(logits, call.cp_group),
        input_ids,
        {},
        logits_processor=_processor(up, call),
        logits_processor_args=arguments,
        data_format="thd",
        **accepted(up.engine_forward, **layout),
    )


def packed(up, call: calls.PackedCall):
    """The engine forward as ``forward_step`` calls it: ``label`` the token ids (as its
    ``label = input_ids.clone()``), the temperature one float32 per sample expanded by verl's ``expand_as_nested``;
    verl's per-position sequences (position ``p``: token ``p + 1``) read as each sample's response, this CP rank's
    zigzag view (``packed.py``)."""
    if not call.inputs.tokens:
        return [], ([] if call.with_entropy else None)
    cp, cp_rank = call.cp
    out = _forward(up, call)
    views = packing.view_positions(call.inputs, cp, cp_rank)
    log_probs = verl_packed.views(out["log_probs"].unbind(), views, call.cp_group)
    entropy = verl_packed.views(out["entropy"].unbind(), views, call.cp_group) if call.with_entropy else None
    return log_probs, entropy


def policy_loss(up, call: calls.PolicyCall):
    """``ppo_loss`` on the packed forward's output (``policy.py``); under CP verl's loss reads the gathered
    batch, so the advantages, old log-probs and the options' per-sample tensors are gathered from the views, and
    each rank's share is the value / ``cp`` with verl's gradient."""
    (cp, cp_rank), out = call.cp, _forward(up, call)
    loss = verl_policy.packed_loss(up, call, out)
    if cp > 1:  # each rank's loss is the whole batch's; its share (the harness's convention) keeps that gradient
        loss = loss - loss.detach() * (1 - 1 / cp)
    responses = packing.view_positions(call.inputs, cp, cp_rank)
    log_probs = verl_packed.picked(out["log_probs"].unbind(), responses)
    entropy = verl_packed.picked(out["entropy"].unbind(), responses) if call.with_entropy else None
    return loss, log_probs, entropy


def token_policy_loss(up, call: calls.TokenPolicyCall):
    """``ppo_loss`` on ``[B, R]`` log-prob matrices (``policy.py``), each row the response of a sequence with a
    one-token prompt."""
    rows, width = call.log_probs.shape

    def sequences(matrix):  # position p: token p + 1
        return torch.cat([matrix, matrix.new_zeros(rows, 1)], dim=1).reshape(-1)

    output = {"log_probs": sequences(call.log_probs)}
    if call.entropy is not None:
        output["entropy"] = sequences(call.entropy)
    lengths = [(width + 1, width)] * rows
    return verl_policy.loss(
        up, call, output, lengths, call.loss_mask, old=call.old_log_probs, adv=call.advantages, options=call.options
    )


def hidden(up, call: calls.HiddenCall):
    """``FusedLinearForPPO(chunk_size)`` called as a module (all rows one chunk when None), its entropy as verl
    returns it, dropped when not asked for."""
    rows = call.hidden.shape[0]
    chunk = max(rows, 1) if call.chunk_size is None else call.chunk_size  # 0 and negatives reach verl as given
    log_probs, entropy = up.FusedLinearForPPO(chunk_size=chunk)(
        call.hidden, call.weight, call.targets.to(call.hidden.device), float(call.temperature)
    )
    return log_probs, (entropy if call.with_entropy else None)


# ---- the record ---------------------------------------------------------------------------------

_PROCESSOR = (
    "verl's Megatron engine (workers/engine/megatron/transformer_impl.py, #3422, 2025-09) and its logits processor "
    "(a closure in forward_step; the method _lm_head_logits_processor since #6848) are not in this revision"
)
_ENGINE_FORWARD = f"{_PROCESSOR}, or not its engine forward (gptmodel_forward_no_padding since #3600, 2025-10)"


def _both_forms(serves: str, more: tuple, translate, brings: set, since: str) -> tuple[Entry, Entry]:
    """The entry through the current processor (required), then through an older revision's closure (``since``)."""
    return (
        Entry(serves, ("logits_processor", *more), translate, frozenset(brings)),
        Entry(serves, ("logits_closure", *more), translate, frozenset(brings), since=since),
    )


def _takes_temperature(up) -> bool:
    """The revision's logits processor takes a ``temperature`` (before it, the engine divided the logits outside
    the composition these entries call)."""
    return up.takes_temperature


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
        "fused": Module(("verl.utils.experimental.torch_functional",)),
    },
    symbols={
        "logits_processor": Method((ENGINE,), "MegatronEngineWithLMHead", "_lm_head_logits_processor"),
        # before verl #6848 (2026-07): a closure over forward_step's locals (an older form, not a skip)
        "logits_closure": Method((ENGINE,), "MegatronEngineWithLMHead", "forward_step", inner="logits_processor"),
        "engine_forward": Symbol("model_forward", ("gptmodel_forward_model_engine", "gptmodel_forward_no_padding")),
        "vocab_parallel_entropy_with_chunking": Symbol("tensor_parallel", ("vocab_parallel_entropy_with_chunking",)),
        "expand_as_nested": Symbol("torch_functional", ("expand_as_nested",)),
        # read by the options (ppo_loss imports them)
        **{name: Symbol("core_algos", (name,)) for name in ("get_policy_loss_fn", "agg_loss", "kl_penalty")},
        "ppo_loss": Symbol("losses", ("ppo_loss",)),
        "FusedLinearForPPO": Symbol("fused", ("FusedLinearForPPO",)),
    },
    entries=(
        *_both_forms("token_log_probs", (), token, {"token", "entropy"}, _PROCESSOR),
        *_both_forms(
            "packed_log_probs", ("engine_forward",), packed, {"packed", "entropy", "cp_zigzag"}, _ENGINE_FORWARD
        ),
        *_both_forms(
            "policy_loss",
            ("engine_forward", "ppo_loss"),
            policy_loss,
            {"policy_loss", "entropy", "cp_zigzag"},
            f"{_ENGINE_FORWARD}, or not its ppo_loss (workers/utils/losses.py)",
        ),
        Entry(
            "token_policy_loss",
            ("ppo_loss",),
            token_policy_loss,
            frozenset({"token_policy_loss", "token_policy_entropy"}),
            since="verl's actor loss ppo_loss arrived with its Megatron engine (#3235, 2025-08)",
        ),
        Entry(
            "hidden_log_probs",
            ("FusedLinearForPPO",),
            hidden,
            frozenset({"hidden", "entropy", "chunking", "temperature"}),
        ),
    ),
    options=(
        # the processor reads the engine config's entropy chunk where its file has the chunked entropy (#6446)
        *(Option("chunking", ("vocab_parallel_entropy_with_chunking",), level) for level in ("token", "packed")),
        *(Option("temperature", (_takes_temperature,), level) for level in ("token", "packed", "policy_loss")),
        Option("cp_allgather", ("engine_forward(cp_layout)",), "packed"),
        *verl_policy.OPTIONS,
    ),
    placeholders=stand_ins.PLACEHOLDERS,
    not_declared={
        "entropy_gate": "verl's logits processor has no gate: its entropy keeps a graph whenever computed (its "
        "callers compute reference and old log-probs under no_grad, which the forward-only check runs)",
        "bshd": "the engine's bshd path (data_format='bshd', preprocess_bshd_engine) is not mapped",
        "response_only": "verl evaluates every row",
        "loss_mask_only": "verl evaluates every row",
        "donation": "verl never writes the gradient over the logits",
        "hidden_tp": "the torch fused LM head takes the whole head (verl's TP kernel, verl/utils/kernel/, asserts "
        "CUDA tensors and uses CUDA streams: not reachable on a CPU run)",
        **verl_policy.NOT_DECLARED,
    },
    expectations=("verl.toml", "verl-hidden.toml"),
    prepare=_prepare,
)
