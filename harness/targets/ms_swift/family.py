"""ms-swift (modelscope/ms-swift): ``ms_swift==X`` or ``ms_swift=PATH``.

What runs is ``MegatronGRPOTrainer.forward_step`` (the trainer's own per-micro-batch composition: the in-place
temperature division, ``compute_logps_and_entropy_from_logits``, under CP ``reconstruct_tensor_cp``, padding-free
``pad_logps_back_to_batch``) and ``loss_func`` (``policy.py``), each loaded alone, since the trainer module imports
the whole trainer stack, and run with a strict stand-in ``self``. The log-probs are Megatron's own
``vocab_parallel_cross_entropy`` (``megatron.py``: a second root), so its in-place shift and normaliser are in reach.
"""

from __future__ import annotations

import torch

from harness.targets.ms_swift import megatron, policy
from harness.targets.ms_swift.policy import Settings
from harness.targets.upstream import calls, megatron_stand_in, packing
from harness.targets.upstream.family import Entry, Family
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.placeholders import holding, refusing

UTILS = "swift/megatron/trainers/vocab_parallel_utils.py"
TRAINER = "swift/megatron/trainers/grpo_trainer.py"
OWNER = "MegatronGRPOTrainer"
DEFINITIONS = {  # each loaded alone: its file, and what it imports that the record binds instead
    "compute_logps_and_entropy_from_logits": (UTILS, ("mpu", "tensor_parallel")),
    "reconstruct_tensor_cp": ("swift/megatron/trainers/utils.py", ("mpu",)),
    # swift.utils' helper serves only the position_ids fallback; forward_step passes seq_lengths
    "pad_logps_back_to_batch": ("swift/rlhf_trainers/utils.py", ("get_cu_seqlens_from_position_ids",)),
}
IGNORED = -100  # ms-swift's label for a position whose next token is no completion token


def _prepare(up) -> None:
    """Megatron's cross entropy from its root; ms-swift's utilities and trainer methods loaded alone on it."""
    state = megatron_stand_in.install()
    up.megatron = megatron.load(state)
    up.roots = (up.megatron.loader,)
    up.mpu = holding(  # the kernel's parallel state, the last pipeline stage, one data-parallel rank (none here)
        **{k: v for k, v in vars(state).items() if k.startswith("get_")},
        is_pipeline_last_stage=lambda *args, **kwargs: True,
        get_data_parallel_group=lambda *args, **kwargs: megatron_stand_in.SINGLE_RANK,
        get_data_parallel_world_size=lambda *args, **kwargs: 1,
    )("megatron.core.mpu")
    bound = {
        "mpu": up.mpu,
        "tensor_parallel": up.megatron.tensor_parallel,
        "get_cu_seqlens_from_position_ids": refusing("swift.utils.get_cu_seqlens_from_position_ids"),
    }
    up.read_from = {}
    for key, (path, names) in DEFINITIONS.items():
        up.read_from[key] = path
        setattr(up, key, up.loader.symbol_if_present(path, key, stand_ins={n: bound[n] for n in names}))
    trainer_names = {  # the trainer file's module-level names its two methods read, bound instead of imported
        "mpu": up.mpu,
        **{key: getattr(up, key) for key in DEFINITIONS},
        "profiling_decorator": lambda function: function,  # timing only
        "gather": lambda tensor, group=None: tensor,  # metrics over data-parallel ranks: one here
        "gather_object": lambda objects, group=None: objects,
        "logger": refusing("ms_swift.logger"),
        "RouterReplayHelper": refusing("RouterReplayHelper"),  # routing replay is off
        "set_router_replay_data": refusing("set_router_replay_data"),
        "RouterReplayAction": None,
        "GRPOBatch": object,  # an annotation
    }
    for name in ("forward_step", "loss_func"):
        up.read_from[name] = f"{TRAINER} ({OWNER}.{name})"
        setattr(up, name, up.loader.method_if_present(TRAINER, OWNER, name, stand_ins=trainer_names))
    policy.prepare(up)


def _forward_step(up, call, data: dict, logits, micro_batch_size: int, **args):
    """The model answers with a fresh copy of the logits ``[1, rows, V_local]``: a model's output is its own tensor,
    which the trainer divides in place (the memory checks charge the copy)."""
    trainer = Settings(
        args=Settings(**args),
        _prepare_batch=lambda data: data,  # the batch is already this rank's (CP split, on its device)
        enable_routing_replay=False,
        micro_batch_size=micro_batch_size,
        temperature=call.temperature,
        compute_entropy=call.with_entropy,
        loss_func=refusing("MegatronGRPOTrainer.loss_func"),  # handed to Megatron's schedule, never called here
    )
    log_probs, loss = up.forward_step(trainer, iter([data]), lambda **inputs: logits.unsqueeze(0).clone())
    return log_probs, loss.keywords["data"]["per_token_entropy"]


def token(up, call: calls.TokenCall):
    """``forward_step(trainer, iter([data]), model)``: the log-probs it returns, the entropy it hands ``loss_func``."""
    labels = call.targets.unsqueeze(0)  # Megatron's batch is already shifted: the protocol's targets
    batch = Settings(completion_mask=call.targets.new_ones(labels.shape, dtype=bool))
    data = {"grpo_batch": batch, "labels": labels, "input_ids": labels}
    log_probs, entropy = _forward_step(up, call, data, call.logits, 1, context_parallel_size=1, padding_free=False)
    return log_probs.squeeze(0), (entropy.squeeze(0) if call.with_entropy else None)


def labels(inputs, cp: int, cp_rank: int, device) -> torch.Tensor:
    """This rank's labels ``[1, rows]``: the next token at each position of the rank's zigzag view of a response
    (``packing.py``: Megatron's layout), -100 elsewhere."""
    out = torch.full((1, packing.local_sequence_rows(inputs, cp)), IGNORED, dtype=torch.long, device=device)
    views = zip(packing.view_positions(inputs, cp, cp_rank), packing.view_local_rows(inputs, cp, cp_rank))
    for i, (tokens, total, (positions, rows)) in enumerate(zip(inputs.tokens, inputs.total_lengths, views)):
        if tokens.numel() != total:  # the labels are built from them: a short row would broadcast into wrong labels
            raise ValueError(
                f"tokens[{i}] holds {tokens.numel()} ids but total_lengths[{i}] = {total}: give each sample's full "
                "token ids (ms-swift's labels are built from them)"
            )
        following = tokens.to(device=device, dtype=torch.long)[torch.tensor(positions, dtype=torch.long) + 1]
        out[0, torch.tensor(rows, dtype=torch.long, device=device)] = following
    return out


def _view(batch: torch.Tensor, inputs, cp: int, cp_rank: int) -> list[torch.Tensor]:
    """Each sample's zigzag view of its response from ``[B, max_len]`` (sequence ``i`` right-aligned)."""
    offsets = [batch.shape[1] - length for length in packing.padded_lengths(inputs, cp)]
    return [
        batch[i, torch.tensor([offsets[i] + p for p in positions], dtype=torch.long, device=batch.device)]
        for i, positions in enumerate(packing.view_positions(inputs, cp, cp_rank))
    ]


def packed(up, call: calls.PackedCall):
    """``forward_step(trainer, iter([data]), model)`` on the padding-free micro-batch; this rank's views."""
    cp, cp_rank = call.cp
    device = call.logits.device
    lengths = packing.padded_lengths(call.inputs, cp)
    cu_seqlens = packing.cu_seqlens_padded(call.inputs, cp, device)
    seq_lens = torch.tensor(lengths, dtype=torch.long, device=device)
    mask = torch.ones(len(lengths), max(lengths, default=0), dtype=torch.bool, device=device)
    data = {
        "grpo_batch": Settings(completion_mask=mask, seq_lengths=seq_lens),
        "labels": labels(call.inputs, cp, cp_rank, device),
        "packed_seq_params": Settings(cu_seqlens_q=cu_seqlens, cu_seqlens_kv=cu_seqlens, seq_lens=seq_lens),
    }
    logits = call.logits[: packing.local_sequence_rows(call.inputs, cp)]
    args = {"context_parallel_size": cp, "padding_free": True, "cp_partition_mode": "zigzag"}
    log_probs, entropy = _forward_step(up, call, data, logits, len(lengths), **args)
    views = _view(log_probs, call.inputs, cp, cp_rank)
    return views, (_view(entropy, call.inputs, cp, cp_rank) if call.with_entropy else None)


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
            ("forward_step", *DEFINITIONS),
            packed,
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
