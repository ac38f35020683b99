"""ms-swift (modelscope/ms-swift) as a record on the upstream kernel: ``ms_swift==X`` or ``ms_swift=PATH``.

What runs is ms-swift's Megatron GRPO trainer, ``MegatronGRPOTrainer``
(``swift/megatron/trainers/grpo_trainer.py``), its methods loaded alone
(``Loader.method``: the module imports the whole trainer stack) and run with a
strict stand-in ``self``:

* token level: ``forward_step``, the composition the trainer runs per
  micro-batch: the model's fresh output divided IN PLACE by the temperature,
  ``compute_logps_and_entropy_from_logits`` (``vocab_parallel_utils.py``: its
  own log-softmax and entropy, then Megatron's vocab-parallel cross entropy,
  which shifts its input in place). The model is the translation: it answers
  with a fresh copy of the protocol's logits ``[1, rows, V_local]`` (a model's
  output is its own tensor; the copy is a buffer the trainer does not make,
  which the memory checks charge), labels ``[1, rows]`` are the protocol's
  targets (Megatron's batch is already shifted), ``padding_free`` off, CP 1;
* packed: ``forward_step`` again, ``padding_free`` on, zigzag CP, with
  ms-swift's own ``reconstruct_tensor_cp`` and ``pad_logps_back_to_batch``
  (``packed.py``);
* the GRPO loss: ``loss_func`` (``policy.py``), which ``forward_step`` hands
  Megatron's schedule.

Megatron's cross entropy is Megatron's own file, not the harness's stand-in:
it is what ms-swift's code calls, so a defect of it (its in-place shift, its
normaliser) is in reach, and its files are in ``executed``. Megatron is a
second root (``megatron.py``), located and loaded through the kernel's root
finder and loader; ``megatron.core.parallel_state`` is the harness's stand-in
(the job's groups).
"""

from __future__ import annotations

import types

from harness.targets.ms_swift import megatron, packed, policy
from harness.targets.upstream import calls, megatron_stand_in
from harness.targets.upstream.family import Entry, Family
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.placeholders import refusing

UTILS = "swift/megatron/trainers/vocab_parallel_utils.py"
TRAINER = "swift/megatron/trainers/grpo_trainer.py"
OWNER = "MegatronGRPOTrainer"
HELPERS = {  # key: the file, the definition, what it reads that the record binds instead of importing
    "reconstruct_tensor_cp": ("swift/megatron/trainers/utils.py", "reconstruct_tensor_cp", ("mpu",)),
    # swift.utils' helper serves only the position_ids fallback; forward_step passes seq_lengths
    "pad_logps_back_to_batch": (
        "swift/rlhf_trainers/utils.py",
        "pad_logps_back_to_batch",
        ("get_cu_seqlens_from_position_ids",),
    ),
}


def _refused(name: str, why: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(f"{name} is stood in by harness/targets/ms_swift/family.py ({why}) and must not run")

    return refuse


def _mpu(state) -> types.ModuleType:
    """ms-swift's ``mpu``: the kernel's parallel-state stand-in (the job's TP/CP groups) and what the trainer asks
    beyond it: one pipeline stage (the last), one data-parallel rank (the harness runs no data parallelism)."""
    view = types.ModuleType("megatron.core.mpu")
    view.__dict__.update({k: v for k, v in vars(state).items() if k.startswith("get_")})
    view.is_pipeline_last_stage = lambda *args, **kwargs: True
    view.get_data_parallel_group = lambda *args, **kwargs: megatron_stand_in.SINGLE_RANK
    view.get_data_parallel_world_size = lambda *args, **kwargs: 1
    return view


def trainer_stand_ins(up) -> dict:
    """Module-level names of the trainer's file its two methods read, bound instead of running their imports."""
    return {
        "mpu": up.mpu,
        "compute_logps_and_entropy_from_logits": up.compute_logps_and_entropy_from_logits,
        "profiling_decorator": lambda function: function,  # timing only
        "gather": lambda tensor, group=None: tensor,  # metrics over data-parallel ranks: one here
        "gather_object": lambda objects, group=None: objects,
        "logger": refusing("ms_swift.logger"),
        "reconstruct_tensor_cp": up.reconstruct_tensor_cp,
        "pad_logps_back_to_batch": up.pad_logps_back_to_batch,
        "RouterReplayHelper": _refused("RouterReplayHelper", "routing replay is off"),
        "set_router_replay_data": _refused("set_router_replay_data", "routing replay is off"),
        "RouterReplayAction": None,
        "GRPOBatch": object,  # an annotation
    }


def _prepare(up) -> None:
    """Megatron's cross entropy from its root; ms-swift's utilities and trainer methods loaded alone on it."""
    state = megatron_stand_in.install()
    up.megatron = megatron.load(state)
    up.roots = (up.megatron.loader,)
    up.mpu = _mpu(state)
    up.read_from = {"compute_logps_and_entropy_from_logits": UTILS}
    up.compute_logps_and_entropy_from_logits = up.loader.symbol_if_present(
        UTILS,
        "compute_logps_and_entropy_from_logits",
        stand_ins={"mpu": state, "tensor_parallel": up.megatron.tensor_parallel},
    )
    bound = {
        "mpu": up.mpu,
        "get_cu_seqlens_from_position_ids": refusing("swift.utils.get_cu_seqlens_from_position_ids"),
    }
    for key, (path, name, names) in HELPERS.items():  # what forward_step calls besides the utilities: ms-swift's own
        up.read_from[key] = path
        setattr(up, key, up.loader.symbol_if_present(path, name, stand_ins={n: bound[n] for n in names}))
    for key, name in (("forward_step", "forward_step"), ("loss_func", "loss_func")):
        up.read_from[key] = f"{TRAINER} ({OWNER}.{name})"
        setattr(up, key, _method(up, name))
    policy.prepare(up)


def _method(up, name):
    if up.loader.read(TRAINER) is None:
        return None
    try:
        return up.loader.method(TRAINER, OWNER, name, stand_ins=trainer_stand_ins(up))
    except LookupError:
        return None


def token(up, call: calls.TokenCall):
    """``forward_step(trainer, iter([data]), model)``: the log-probs it returns, the entropy it hands ``loss_func``."""
    rows = call.targets.shape[0]
    batch = policy.Settings(completion_mask=call.targets.new_ones(1, rows, dtype=bool))
    trainer = policy.Settings(
        args=policy.Settings(context_parallel_size=1, padding_free=False),
        _prepare_batch=lambda data: data,  # CP 1, tensors already on their device: the batch as it is
        enable_routing_replay=False,
        micro_batch_size=1,
        temperature=call.temperature,
        compute_entropy=call.with_entropy,
        loss_func=_refused("loss_func", "the token entry reads the log-probs only"),
    )
    data = {"grpo_batch": batch, "labels": call.targets.unsqueeze(0), "input_ids": call.targets.unsqueeze(0)}
    log_probs, loss = up.forward_step(trainer, iter([data]), packed.Model(call.logits))
    entropy = loss.keywords["data"]["per_token_entropy"]
    return log_probs.squeeze(0), (entropy.squeeze(0) if call.with_entropy else None)


MS_SWIFT = Family(
    name="ms_swift",
    locate=Locate("swift", UTILS, "LPH_MS_SWIFT_PATH", pypi="ms-swift"),
    modules={},
    symbols={},
    entries=(
        Entry(
            "token_log_probs",
            ("forward_step", "compute_logps_and_entropy_from_logits"),
            token,
            frozenset({"token", "entropy", "temperature"}),
        ),
        Entry(
            "packed_log_probs",
            ("forward_step", "compute_logps_and_entropy_from_logits", *HELPERS),
            packed.packed,
            frozenset({"packed", "entropy", "temperature", "cp_zigzag"}),
        ),
        Entry("token_policy_loss", ("loss_func",), policy.token_policy_loss, frozenset({"token_policy_loss"})),
    ),
    options=policy.OPTIONS,
    not_declared={
        "entropy_gate": "compute_logps_and_entropy_from_logits has no switch: the entropy is built with its graph",
        "chunking": "only the entropy is chunked, at a fixed entropy_chunk_size=512 rows the trainer never changes",
        "cp_allgather": "ms-swift's contiguous CP gathers every sequence whole on every rank with only the rank's own "
        "rows in the graph and computes the whole loss on each rank; a rank's zigzag view of rows another rank holds "
        "has no gradient path there (the protocol's allgather view is a redistribution ms-swift does not make)",
        "bshd": "the padding-free micro-batch is ms-swift's packed form; its padded form is [B, T] rows, not mapped",
        "policy_loss": "forward_step hands loss_func its log-probs (token_policy_loss runs loss_func itself); the loss "
        "from logits, with the CP loss convention, is not mapped yet",
        **policy.NOT_DECLARED,
    },
    expectations=("ms_swift.toml",),
    prepare=_prepare,
)
