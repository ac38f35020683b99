"""The slime family (THUDM/slime) and its fork miles (radixark/miles). Why the translations look as they do:

slime's loss code asserts fp32 logits (its trainer hands them over so): every entry casts them with a differentiable
``.float()``. ``args`` is strict (a setting a revision reads that ``SLIME_ARGS`` lacks is an error naming it, never a
silent default). Megatron's ``mpu`` and fused cross entropy are the harness's stand-ins (``upstream/megatron_*``);
``loss_function``'s bookkeeping (micro-batches, global batch) is not applied: the checks hold one micro-batch's loss.
"""

from __future__ import annotations

import functools
import types
from unittest import mock

import torch

from harness.targets.slime import policy
from harness.targets.upstream import calls, megatron_cross_entropy, megatron_stand_in
from harness.targets.upstream.family import Entry, Family, Module, Option, Symbol, accepted, parameters
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.placeholders import RAY_WITHOUT_CLUSTER, Placeholder, holding
from harness.targets.upstream.settings import StrictSettings

GATE_PARAMETERS = ("with_entropy_grad", "need_entropy_grad", "entropy_requires_grad")
SLIME_ARGS = dict(  # the args slime's loss code reads: a plain GRPO/PPO policy loss, the call's settings over it
    rollout_temperature=1.0, log_probs_chunk_size=-1, allgather_cp=False, qkv_format="thd", entropy_coef=0.0,
    eps_clip=0.2, eps_clip_high=0.2, eps_clip_c=None, advantage_estimator="grpo", use_rollout_logprobs=False,
    use_opsm=False, use_tis=False, get_mismatch_metrics=False, custom_tis_function_path=None,
    custom_pg_loss_reducer_function_path=None, use_kl_loss=False, use_unbiased_kl=False, kl_loss_coef=0.0,
    kl_loss_type="low_var_kl", calculate_per_token_loss=False, rollout_top_p=1.0, recompute_loss_function=False,
    enable_off_policy_correction=False,  # read by the revisions between #179 and #234 (2025-08)
    use_dynamic_batch_size=False,  # read by the first revisions' policy_loss_func
    true_on_policy_mode=False, observe_training_entropy=False, skip_actor_forward_only=False,  # miles' only
)  # fmt: skip


class SlimeArgs(StrictSettings):
    READ_AS, MAPPED_IN = "slime args", "harness/targets/slime/family.py (SLIME_ARGS)"


class ParallelSettings(StrictSettings):  # slime #1373..#1442's parallel_state argument, miles' get_parallel_state()
    READ_AS, MAPPED_IN = "slime parallel_state", "harness/targets/slime/family.py (parallel_state)"


def parallel_state(tp_group, cp_group) -> ParallelSettings:
    """The job's groups as slime's ``ParallelState`` / miles' ``GroupInfo`` read them (``SINGLE_RANK`` for one
    rank); every other dimension one rank (a dimension not provided raises, naming it)."""

    def info(group):
        size, rank = calls.size_and_rank(group)
        group = megatron_stand_in.SINGLE_RANK if group is None else group
        return types.SimpleNamespace(rank=rank, size=size, group=group)

    tp, cp, single = info(tp_group), info(cp_group), info(None)
    return ParallelSettings(
        tp=tp, cp=cp, pp=single, ep=single, etp=single, cp_comm_type=None, is_ulysses_cp=False,
        is_pp_last_stage=True, tp_rank=tp.rank, tp_size=tp.size, tp_group=tp.group, cp_rank=cp.rank,
        cp_size=cp.size, cp_group=cp.group, dp_rank=0, dp_size=1, dp_src_rank=0, dp_cp_rank=cp.rank,
        dp_cp_size=cp.size, dp_group=None, dp_cp_group=cp.group, vpp_size=1,
    )  # fmt: skip


def _miles_state(up, tp_group, cp_group):  # miles finds its groups through get_parallel_state()
    if up.set_parallel_state is not None:
        up.set_parallel_state(parallel_state(tp_group, cp_group))


def _fp32(logits):  # integer logits untouched: what slime does with them is what the checks see
    return logits.float() if logits.is_floating_point() and logits.dtype != torch.float32 else logits


def _chunk(call) -> int:
    return -1 if call.chunk_size is None else call.chunk_size


def token(up, call: calls.TokenCall, **extra):
    """``logits / T`` (``calculate_log_probs_and_entropy`` takes logits its caller already divided, as
    ``get_log_probs_and_entropy`` does), one target id per row (the shifted tokens its callers pass), the entropy
    gate under the revision's name for it."""
    fn = up.calculate_log_probs_and_entropy
    scores = _fp32(call.logits)
    if call.temperature != 1.0:
        scores = scores / call.temperature
    gate = next((p for p in GATE_PARAMETERS if p in parameters(fn)), None)
    options = accepted(fn, tp_group=call.group, chunk_size=_chunk(call), **({gate: call.entropy_grad} if gate else {}))
    log_probs, entropy = fn(scores, call.targets, with_entropy=call.with_entropy, **options, **extra)
    return log_probs.squeeze(-1), (entropy if call.with_entropy else None)


def sampling(up, call: calls.SamplingCall):
    """The keep-mask replay: the trainer's per-rank bool ``[rows, V_local]`` mask handed to the token function."""
    return token(up, call, log_prob_keep_mask=call.kept.dense)


def _layout(call: calls.PackedCall, **settings):
    """slime's logits tensor, ``args``, row lists and layout keywords for this batch."""
    inputs = call.inputs
    layout = dict(allgather_cp=inputs.cp_mode == "allgather", qkv_format=inputs.qkv_format)
    layout.update(rollout_temperature=call.temperature, log_probs_chunk_size=_chunk(call), **settings)
    rows = {
        "unconcat_tokens": list(inputs.tokens),
        "total_lengths": list(inputs.total_lengths),
        "response_lengths": list(inputs.response_lengths),
    }
    scores, extra = _fp32(call.logits), {}
    if inputs.qkv_format == "bshd":
        batch = len(inputs.total_lengths)
        seq_len = scores.shape[0] // batch if batch else 0
        scores = scores.view(batch, seq_len, scores.shape[-1])
        extra["max_seq_lens"] = [seq_len] * batch
    else:
        scores = scores.unsqueeze(0)
    extra["parallel_state"] = parallel_state(call.tp_group, call.cp_group)
    return scores, SlimeArgs(**{**SLIME_ARGS, **layout}), rows, extra


def _results(out) -> dict:
    return out[-1] if isinstance(out, tuple) else out


def packed(up, call: calls.PackedCall):
    """slime's own response rows, temperature division and chunking (``args``) on ``[1, T, V_local]`` (thd) or
    ``[B, S, V_local]`` with ``max_seq_lens`` (bshd); the entropy's gradient asked for as a slime caller asks,
    ``args.entropy_coef`` 1 (else 0); the groups through ``mpu``, miles' ``set_parallel_state`` or the
    ``parallel_state`` argument (slime #1373..#1442)."""
    fn = up.get_log_probs_and_entropy
    wants_grad = bool(call.with_entropy and call.entropy_grad)
    scores, args, rows, extra = _layout(call, entropy_coef=1.0 if wants_grad else 0.0)
    keywords = accepted(fn, entropy_requires_grad=wants_grad, **extra)
    result = _results(fn(scores, args=args, **rows, with_entropy=call.with_entropy, **keywords))
    entropy = result.get("entropy") if call.with_entropy else None
    return list(result["log_probs"]), (list(entropy) if entropy is not None else None)


def policy_loss(up, call: calls.PolicyCall):
    """``args`` with the call's clip range, entropy coefficient and options (``policy.settings``); the
    per-sample log-probs and entropy returned are those slime's loss was built from (its own call of
    ``get_log_probs_and_entropy``, recorded; none where it computed none: miles before #1464 only with a nonzero
    coefficient); the first revisions' ``policy_loss_func`` returns ``loss / cp_size``
    (Megatron multiplies back), so the rank's share is that times the CP size."""
    masks = [mask.float() for mask in call.inputs.loss_masks]
    settings, entries = policy.settings(up, call, masks)
    scores, args, rows, extra = _layout(call, **settings)
    batch = {"advantages": list(call.advantages), "log_probs": list(call.old_log_probs), **rows, "loss_masks": masks}
    batch.update(entries, **{k: v for k, v in extra.items() if k != "parallel_state"})
    loss_module = up.modules["policy"]  # its own name for the packed entry point (miles imports it elsewhere)
    original, recorded = loss_module.get_log_probs_and_entropy, {}

    @functools.wraps(original)
    def recording(*arguments, **keywords):
        out = original(*arguments, **keywords)
        recorded["result"] = _results(out)
        return out

    with mock.patch.object(loss_module, "get_log_probs_and_entropy", recording):
        if up.policy_loss_function is None:
            loss, _normaliser, _metrics = up.policy_loss_func(args, batch, 1, scores)
            loss = loss * call.cp[0]
        else:
            lengths = list(call.inputs.total_lengths), list(call.inputs.response_lengths)
            keywords = accepted(up.get_sum_of_sample_mean, qkv_format=call.inputs.qkv_format, **extra)
            per_token = {"calculate_per_token_loss": True} if args.calculate_per_token_loss else {}
            reducer = up.get_sum_of_sample_mean(*lengths, masks, **keywords, **per_token)
            keywords = accepted(up.policy_loss_function, parallel_state=extra["parallel_state"])
            loss, _metrics = up.policy_loss_function(
                args=args, batch=batch, logits=scores, sum_of_sample_mean=reducer, **keywords
            )
    result, entropy = recorded["result"], None
    if call.with_entropy and result.get("entropy") is not None:  # miles before #1464: none when its coefficient is 0
        entropy = list(result["entropy"])
    return loss, list(result["log_probs"]), entropy


PLACEHOLDERS = (
    megatron_stand_in.PLACEHOLDER,
    Placeholder(
        "megatron.core.fusions.fused_cross_entropy",
        "Megatron's vocab-parallel cross entropy (older compute_log_probs, miles' compute_log_probs)",
        lambda name: megatron_cross_entropy.install(),
        "process",
    ),
    Placeholder(
        "ray",
        "imported at module level by the utility modules for functions never called here; no cluster: the @ray.remote "
        "miles' utilities apply at import (2026-01 to 05) leaves a function as it is",
        RAY_WITHOUT_CLUSTER,
    ),
    *(
        Placeholder(name, "imported at module level by slime's utility modules for functions never called here")
        for name in ("httpx", "wandb")
    ),
    *(
        Placeholder(name, "imported by the 2025-06/07 data module (pulled in by the loss module), never called")
        for name in ("megatron.core.packed_seq_params", "megatron.core.utils")
    ),
)
TOKEN = ("calculate_log_probs_and_entropy",)
LOSS = frozenset({"policy_loss", "entropy", "temperature"})
ENTRIES = (
    Entry(
        "token_log_probs",
        TOKEN,
        token,
        frozenset({"token", "entropy"}),
        since="0d3ada3a7 (#1185, reverted by #1189 the next day) has no calculate_log_probs_and_entropy: its "
        "compute_log_probs and compute_entropy_from_logits are composed only inside get_log_probs_and_entropy, "
        "which the packed and policy checks run",
    ),
    Entry("packed_log_probs", ("get_log_probs_and_entropy",), packed, frozenset({"packed", "entropy", "temperature"})),
    *(
        Entry("policy_loss", (*first, "get_log_probs_and_entropy"), policy_loss, LOSS)
        for first in (("policy_loss_function", "get_sum_of_sample_mean"), ("policy_loss_func",))
    ),
    Entry("sampling_log_probs", TOKEN, sampling, frozenset(), since="the keep-mask replay arrived with slime #2102"),
)
LAYOUT_OPTIONS = (
    Option("chunking", ("calculate_log_probs_and_entropy(chunk_size)",), "packed"),
    Option("entropy_gate", tuple(f"calculate_log_probs_and_entropy({p})" for p in GATE_PARAMETERS), "packed"),
    Option("bshd", ("get_log_probs_and_entropy(max_seq_lens)",), "packed"),
    Option("cp_zigzag", ("get_logits_and_tokens_offset_with_cp",), "packed"),
    Option("cp_allgather", ("allgather_cp_redistribute",), "packed"),
    *(
        Option(capability, ("calculate_log_probs_and_entropy(log_prob_keep_mask)",), "token")
        for capability in ("sampling", "sampling_dense", "sampling_force_keep")
    ),
)
NOT_DECLARED = {
    "response_only": "no revision's get_log_probs_and_entropy drops rows before the softmax (slime #2076's branch "
    "is not merged)",
    "loss_mask_only": "as response_only",
    "donation": "slime never writes the gradient over the logits",
    "sampling_csr": "the trainer expands the rollout's CSR into the dense keep mask before this call",
    "sampling_derived": "slime replays the rollout's kept set, never derives one",
    "sampling_entropy": "slime's entropy stays over the full vocabulary (logprob only; entropy stays unmasked)",
    **dict.fromkeys(("sampling_error", "sampling_neg_inf"), "the sampled token is always force-kept"),
    "hidden": "slime's Megatron path computes log-probs from the logits (no fused LM head)",
}
# The definitions the records call, by key of the record's modules (the loss module's own import of a helper counts
# as present); until slime #278 (2025-09) the token function lived in the loss module, without a tp_group parameter.
SYMBOLS = {
    **{
        name: Symbol(module, (name,))
        for module, names in (
            ("token", ("compute_policy_loss", "compute_cispo_loss", "compute_approx_kl")),
            ("loss", ("get_log_probs_and_entropy", "get_logits_and_tokens_offset_with_cp")),
            ("policy", ("policy_loss_function", "policy_loss_func", "vanilla_tis_function")),
            ("cp_utils", ("get_sum_of_sample_mean",)),
        )
        for name in names
    },
    "calculate_log_probs_and_entropy": Symbol(("token", "loss"), ("calculate_log_probs_and_entropy",)),
    "allgather_cp_redistribute": Symbol("loss", ("_allgather_cp_redistribute", "allgather_cp_redistribute")),
}
SLIME = Family(
    name="slime",
    locate=Locate("slime", "slime/utils/ppo_utils.py", "LPH_SLIME_PATH"),
    modules={
        "token": Module(("slime.utils.ppo_utils",)),
        # The loss modules lived in backends/training_utils/ between #1373 and #1442 (an older form, not a skip).
        "loss": Module(("slime.backends.megatron_utils.loss", "slime.backends.training_utils.loss")),
        "cp_utils": Module(("slime.backends.megatron_utils.cp_utils", "slime.backends.training_utils.cp_utils")),
        "policy": Module(("slime.backends.megatron_utils.loss", "slime.backends.training_utils.loss")),
    },
    symbols=SYMBOLS,
    entries=ENTRIES,
    options=LAYOUT_OPTIONS + policy.OPTIONS,
    placeholders=PLACEHOLDERS,
    not_declared=NOT_DECLARED | policy.NOT_DECLARED,
    expectations=("slime.toml",),
)


class _BaseModel:
    """pydantic's ``BaseModel`` as miles' event models use it at import: subclassable, with ``model_fields``."""

    def __init_subclass__(cls, **options):
        names = {n for klass in cls.__mro__ for n in getattr(klass, "__annotations__", {})}
        cls.model_fields = {n: types.SimpleNamespace(default=getattr(cls, n, None)) for n in names}


_HUB = "miles.backends.training_utils.loss_hub"
_OLDER_LOSS = ("miles.backends.training_utils.loss", "miles.backends.megatron_utils.loss")
MILES = Family(
    name="miles",
    # The marker is the package (from 2025-10-08), not the loss_hub (2026-05-21): an older layout is then a
    # MissingUpstream naming the file the record lacks, not "not a checkout".
    locate=Locate("miles", "miles/__init__.py", "LPH_MILES_PATH"),
    # Older forms: slime's layout under miles/ (megatron_utils/ from 2025-10-08, training_utils/ from 2026-01-12,
    # where set_parallel_state arrived; before it, the groups come from mpu), until the loss_hub (2026-05-21).
    modules={
        "token": Module((f"{_HUB}.math_utils", "miles.utils.ppo_utils")),
        "loss": Module((f"{_HUB}.logit_processors", *_OLDER_LOSS)),
        "policy": Module((f"{_HUB}.losses", *_OLDER_LOSS)),
        "cp_utils": Module(tuple(f"miles.backends.{where}.cp_utils" for where in ("training_utils", "megatron_utils"))),
        "parallel": Module(("miles.backends.training_utils.parallel",)),
    },
    symbols=SYMBOLS | {"set_parallel_state": Symbol("parallel", ("set_parallel_state",))},
    entries=ENTRIES,
    options=LAYOUT_OPTIONS + tuple(o for o in policy.OPTIONS if o.capability == "policy_agg_token-sum"),
    placeholders=(
        *PLACEHOLDERS,
        Placeholder(
            "pydantic",
            "miles' event logger (losses.py -> utils/misc.py -> logging_utils.py) builds its models and a TypeAdapter "
            "at import; no event is logged here",
            holding(  # TypeAdapter is subscripted in an annotation and called on the event union: ``type`` does both
                BaseModel=_BaseModel,
                TypeAdapter=type,
                ConfigDict=dict,
                NonNegativeInt=int,
                Discriminator=lambda *args, **kwargs: None,
            ),
        ),
    ),
    not_declared=NOT_DECLARED
    | {
        option.capability: "miles' other policy options (loss_hub/corrections.py, its own settings) are not mapped "
        "yet: the next step of this record"
        for option in policy.OPTIONS
        if option.capability != "policy_agg_token-sum"
    },
    expectations=("miles.toml",),
    context=_miles_state,
)
