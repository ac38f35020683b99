"""ms-swift (modelscope/ms-swift): ``ms_swift==X`` or ``ms_swift=PATH``.

``MegatronGRPOTrainer.forward_step`` and ``loss_func`` (``policy.py``) run, each loaded alone (the trainer module
imports the whole trainer stack) on a strict stand-in ``self``. Their log-probs are Megatron's own
``vocab_parallel_cross_entropy`` from a second root (``LPH_MEGATRON_PATH``), not the kernel's stand-in
(``upstream/megatron_cross_entropy.py``): its in-place shift and normaliser are in reach and its files executed.

The batch has two layouts (``_layout``). Since #9580 (2026-06-23) the rollout's columns travel in
``data["grpo_batch"]``; from #7945 (2026-02-16, Megatron-LM's training module dropped) until then they are the
batch's own keys. In that older layout the CP gather is the RLHF mixin's ``_postprocess_packed_tensor_cp``
(``rlhf_mixin.py``) until #9471 (2026-06-08), and until #8427 (2026-03-26) ``forward_step`` hands the loss its
log-probs in the batch and asks the model for its own loss unless it computes the entropy: the record stands in the
model's logits only, so there the stand-in trainer is one that logs the entropy and every call runs the logits
branch. Until #9641 (2026-06-29) the loss takes one advantage per sequence, which the protocol's per-token
advantages cannot be: its entry is then not declared. Before #7945 the methods read their arguments through
Megatron-LM's ``get_args`` (``Arguments``: the running trainer's). Older compositions, whose log-probs exist only
inside the loss (the model's own loss through ``self.get_logps``, before #7263), are load ERRORs naming it.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
import sys
import types

import torch

from harness.targets.ms_swift import policy, reading
from harness.targets.upstream import calls, megatron_stand_in, packing
from harness.targets.upstream.family import Entry, Family, field_names
from harness.targets.upstream.loader import Loader, MissingUpstream
from harness.targets.upstream.locate import Locate, find
from harness.targets.upstream.placeholders import holding, refusing
from harness.targets.upstream.symbols import source_tree

UTILS = "swift/megatron/trainers/vocab_parallel_utils.py"
TRAINER = "swift/megatron/trainers/grpo_trainer.py"
OWNER = "MegatronGRPOTrainer"
ARGUMENTS = "swift/megatron/arguments/megatron_args.py"
# each loaded alone: its files (the first present, Loader.first_present), and what it imports that the record binds
DEFINITIONS = {
    "compute_logps_and_entropy_from_logits": ((UTILS,), ("mpu", "tensor_parallel")),
    "reconstruct_tensor_cp": (("swift/megatron/trainers/utils.py",), ("mpu",)),
    # swift.utils' helper serves only the position_ids fallback; forward_step passes seq_lengths. Its file until
    # ms-swift v4's reorganisation (#7238, 2026-01-14) was swift/trainers/rlhf_trainer/utils.py
    "pad_logps_back_to_batch": (
        ("swift/rlhf_trainers/utils.py", "swift/trainers/rlhf_trainer/utils.py"),
        ("get_cu_seqlens_from_position_ids",),
    ),
}
CROSS_ENTROPY = "megatron.core.tensor_parallel.cross_entropy"
IMPORTERS = ("megatron/core/tensor_parallel/cross_entropy.py", "megatron/core/tensor_parallel/utils.py")
MEGATRON = Locate("megatron", IMPORTERS[0], "LPH_MEGATRON_PATH", pypi="megatron-core")
MEGATRON_HINT = (
    "ms-swift's log-probs run Megatron-core's vocab_parallel_cross_entropy: set LPH_MEGATRON_PATH to a Megatron-LM "
    "checkout (or `pip install --no-deps --target DIR megatron-core==X` and give DIR)"
)
MIXIN = "swift/megatron/trainers/rlhf_mixin.py"
IGNORED = -100  # ms-swift's label for a position whose next token is no completion token
BATCH_KEYS = {"grpo_batch", "labels", "input_ids", "packed_seq_params"}  # what token and packed hand forward_step
# The same batch before #9580: the rollout's columns are the batch's own keys (``_batch``)
COLUMN_KEYS = {
    "advantages",
    "truncated_mask",
    "seq_lengths",
    "completion_mask",
    "labels",
    "input_ids",
    "packed_seq_params",
}


class Arguments:
    """Megatron-LM's ``get_args`` as the trainer's methods called it before #7945 (2026-02-16): the run's arguments,
    which ms-swift parses into Megatron-LM's global ones. Here they are the stand-in trainer's ``args`` while one of
    its methods runs (``bound``); a call outside one is refused by name."""

    def __init__(self):
        self.current = None

    def __call__(self):
        if self.current is None:
            raise MissingUpstream(
                "megatron.training.get_args() was called outside a trainer method the ms_swift record runs "
                "(harness/targets/ms_swift/family.py, Arguments)"
            )
        return self.current

    @contextlib.contextmanager
    def bound(self, args):
        self.current = args
        try:
            yield
        finally:
            self.current = None


def _megatron(state: types.ModuleType) -> types.SimpleNamespace:
    """Megatron's cross entropy on the parallel-state stand-in ``state``: its ``tensor_parallel``, loader, version."""
    # The kernel's stand-in registers ``megatron`` in this process; the installed package is looked up without it.
    stand_ins = {name: sys.modules.pop(name) for name in [n for n in sys.modules if n.split(".")[0] == "megatron"]}
    try:
        located = find("megatron-core", MEGATRON, install_hint=MEGATRON_HINT)
    finally:
        sys.modules.update(stand_ins)
    loader = Loader(located.root, ("megatron",))
    loader.modules["megatron.core.parallel_state"] = state
    names = {}  # megatron.core.utils imports CUDA-only packages at its top: what the files import of it, each alone
    for path in IMPORTERS:
        for node in ast.walk(ast.parse(loader.read(path) or "")):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "megatron.core.utils":
                names.update(dict.fromkeys(alias.name for alias in node.names))
    utils = {name: loader.symbol("megatron/core/utils.py", name) for name in names}
    loader.modules["megatron.core.utils"] = holding(**utils)("megatron.core.utils")
    cross_entropy = loader.module(CROSS_ENTROPY).vocab_parallel_cross_entropy
    package = holding(vocab_parallel_cross_entropy=cross_entropy)("megatron.core.tensor_parallel")
    return types.SimpleNamespace(tensor_parallel=package, loader=loader, version=located.version)


def _prepare(up) -> None:
    """Megatron's cross entropy from its root; ms-swift's utilities, trainer methods and arguments loaded alone."""
    state = megatron_stand_in.install()
    up.megatron = _megatron(state)
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
    up.read_from, up.get_args = {}, Arguments()
    for key, (paths, names) in DEFINITIONS.items():
        path = up.loader.first_present(paths)
        up.read_from[key] = path or " or ".join(paths)
        stand_ins = {n: bound[n] for n in names}
        setattr(up, key, up.loader.symbol_if_present(path, key, stand_ins=stand_ins) if path else None)
    trainer_names = {  # the trainer file's module-level names its two methods read, bound instead of imported
        "mpu": up.mpu,
        **{key: getattr(up, key) for key in DEFINITIONS},
        "profiling_decorator": lambda function: function,  # timing only
        "gather": lambda tensor, group=None: tensor,  # metrics over data-parallel ranks: one here
        "gather_object": lambda objects, group=None: objects,
        "logger": logging.getLogger("harness.ms_swift"),  # messages only (2026-05-20: a debug line per forward)
        "RouterReplayHelper": refusing("RouterReplayHelper"),  # routing replay is off
        "set_router_replay_data": refusing("set_router_replay_data"),
        "RouterReplayAction": None,
        "GRPOBatch": object,  # an annotation
        "pd": refusing("pandas"),  # loss_func's completions table for wandb (2025-11..2026-06): log_completions off
        # Megatron-LM's training module (2025-11..2026-02): its arguments, the running trainer's; its wandb writer
        # (loss_func's completions table, log_completions off here) refused
        "get_args": up.get_args,
        **{name: refusing(f"megatron.training.{name}") for name in ("get_wandb_writer", "training")},
    }
    for name in ("forward_step", "loss_func"):
        up.read_from[name] = f"{TRAINER} ({OWNER}.{name})"
        setattr(up, name, up.loader.method_if_present(TRAINER, OWNER, name, stand_ins=trainer_names))
    up.columns, up.entropy_always, up.postprocess_cp = False, False, None
    up.read_from["postprocess_cp"] = f"{MIXIN} (MegatronRLHFTrainer._postprocess_packed_tensor_cp)"
    loss = source_tree(up.loss_func) if up.loss_func is not None else None
    if up.forward_step is not None:
        _layout(up, source_tree(up.forward_step))
    if loss is not None and reading.per_sequence_advantages(loss):
        up.loss_func = None  # its entry is then not declared, with the reason it gives
    # Megatron RLHF arguments' fields, which declare the options; the names only its __post_init__ reads refused
    unused = {name: refusing(f"swift.utils.{name}") for name in ("get_dist_setting", "json_parse_to_dict", "logger")}
    mixin = up.loader.symbol_if_present(ARGUMENTS, "RLHFMegatronArgumentsMixin", stand_ins=unused)
    up.config_fields = field_names(mixin)


def _layout(up, forward: ast.Module) -> None:
    """Which batch layout ``forward_step`` (its syntax tree ``forward``) reads (``up.columns``) and what the older
    one needs, refusing a composition the record cannot run."""
    reads, names = reading.batch_reads(forward), reading.names_read(forward)
    up.columns = "grpo_batch" not in reads
    if up.columns and "advantages" not in reads:
        raise MissingUpstream(
            f"{TRAINER}: {OWNER}.forward_step reads neither the batch's grpo_batch nor the rollout's columns (before "
            "#7218, 2025-12-29, it takes its batch from self.get_batch and the loss reads the model's own loss "
            "through self.get_logps), which the ms_swift record does not map"
        )
    if "compute_logps_and_entropy_from_logits" not in names:
        raise MissingUpstream(
            f"{TRAINER}: {OWNER}.forward_step never computes log-probs from the logits (#7218 to #7263, 2025-12: it "
            "hands loss_func the model's own loss, which turns it into log-probs through self.get_logps), which the "
            "ms_swift record does not map"
        )
    unmapped = reads - (COLUMN_KEYS if up.columns else BATCH_KEYS)
    if unmapped:
        raise MissingUpstream(
            f"{TRAINER}: {OWNER}.forward_step reads the batch's {sorted(unmapped)}, which the ms_swift record does "
            "not map"
        )
    # Until #8427 forward_step takes the model's own loss unless it computes the entropy: the record runs the
    # logits branch (a trainer logging the entropy), the only one whose model it stands in
    up.entropy_always = "get_logps" in names
    if "_postprocess_packed_tensor_cp" in names:
        # Until #9471 the CP gather is the RLHF mixin's method, loaded alone as forward_step's are
        up.postprocess_cp = up.loader.method_if_present(
            MIXIN,
            "MegatronRLHFTrainer",
            "_postprocess_packed_tensor_cp",
            stand_ins={"mpu": up.mpu, "get_args": up.get_args},
        )


def _model(logits):
    """The model: a fresh copy of the logits ``[1, rows, V_local]`` (which the trainer divides in place); its inputs
    are read by no one, and labels (the model computing its own loss) are refused."""

    def model(**inputs):
        if "labels" in inputs:
            raise MissingUpstream(
                "ms-swift's forward_step asked the model for its own loss (labels given), which the "
                "ms_swift record's model stand-in does not compute"
            )
        return logits.unsqueeze(0).clone()

    return model


def _forward_step(up, call, data: dict, logits, micro_batch_size: int, **args):
    """``forward_step`` on a stand-in trainer; the log-probs the loss would read and the entropy it is handed."""
    trainer = policy.Settings(
        args=policy.Settings(**args),
        _prepare_batch=lambda data: data,  # the batch is already this rank's (CP split, on its device)
        _prepare_model_inputs=dict,  # the columns' model inputs: the stand-in model reads none of them
        enable_routing_replay=False,
        micro_batch_size=micro_batch_size,
        stimer=contextlib.nullcontext(),  # the step timer (timing only)
        temperature=call.temperature,
        compute_entropy=call.with_entropy or up.entropy_always,
        loss_func=refusing("MegatronGRPOTrainer.loss_func"),  # handed to Megatron's schedule, never called here
        get_logps=refusing("MegatronRLHFTrainer.get_logps"),  # the model-loss branch: never taken (_layout)
    )
    if up.postprocess_cp is not None:  # a method of the trainer, bound to the stand-in
        trainer._postprocess_packed_tensor_cp = functools.partial(up.postprocess_cp, trainer)
    with up.get_args.bound(trainer.args):  # before #7945 forward_step read them through get_args
        output, loss = up.forward_step(trainer, iter([data]), _model(logits))
    data = loss.keywords["data"]
    # Until #8427 the log-probs are handed to the loss in the batch (the output is the model's)
    return data.get("per_token_logps", output), data["per_token_entropy"]


def token(up, call: calls.TokenCall):
    """``forward_step(trainer, iter([data]), model)``: the log-probs it returns, the entropy it hands ``loss_func``."""
    labels = call.targets.unsqueeze(0)  # Megatron's batch is already shifted: the protocol's targets
    columns = {
        "completion_mask": call.targets.new_ones(labels.shape, dtype=bool),
        "seq_lengths": labels.new_full((1,), labels.shape[1]),  # read under padding-free batches only
    }
    data = {**_batch(up, columns, rows=1), "labels": labels, "input_ids": labels}
    log_probs, entropy = _forward_step(up, call, data, call.logits, 1, context_parallel_size=1, padding_free=False)
    return log_probs.squeeze(0), (entropy.squeeze(0) if call.with_entropy else None)


def _batch(up, columns: dict, rows: int) -> dict:
    """The rollout's columns as ``forward_step`` reads them: in ``grpo_batch``, or (before #9580) as the batch's own
    keys, with the two more it pops before its batch step (the advantages and truncation reach only the loss)."""
    if not up.columns:
        return {"grpo_batch": policy.Settings(**columns)}
    device = columns["completion_mask"].device
    loss_only = {
        "advantages": torch.zeros(rows, device=device),
        "truncated_mask": torch.zeros(rows, dtype=torch.bool, device=device),
    }
    return {**loss_only, **columns}


def labels(inputs, cp: int, cp_rank: int, device) -> torch.Tensor:
    """This rank's labels ``[1, rows]``: the next token at each position of its zigzag view (``packing.py``)."""
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


def _view(batch: torch.Tensor, lengths, positions) -> list[torch.Tensor]:
    """Each sample's zigzag view of its response from ``[B, max_len]``, sequence ``i`` right-aligned."""
    return [
        row[row.numel() - length :][torch.tensor(at, dtype=torch.long, device=row.device)]
        for row, length, at in zip(batch, lengths, positions)
    ]


def packed(up, call: calls.PackedCall):
    """``forward_step(trainer, iter([data]), model)`` on the padding-free micro-batch; this rank's views."""
    cp, cp_rank = call.cp
    device = call.logits.device
    lengths = packing.padded_lengths(call.inputs, cp)
    cu_seqlens = packing.cu_seqlens_padded(call.inputs, cp, device)
    seq_lens = torch.tensor(lengths, dtype=torch.long, device=device)
    mask = torch.ones(len(lengths), max(lengths, default=0), dtype=torch.bool, device=device)
    params = {"cu_seqlens_q": cu_seqlens, "cu_seqlens_kv": cu_seqlens, "seq_lens": seq_lens}
    data = {
        **_batch(up, {"completion_mask": mask, "seq_lengths": seq_lens}, rows=len(lengths)),
        "labels": labels(call.inputs, cp, cp_rank, device),
        # num_samples: ms-swift's own field (read until #9471)
        "packed_seq_params": policy.Settings(**params, num_samples=len(lengths)),
    }
    logits = call.logits[: packing.local_sequence_rows(call.inputs, cp)]
    args = {"context_parallel_size": cp, "padding_free": True, "cp_partition_mode": "zigzag"}
    log_probs, entropy = _forward_step(up, call, data, logits, len(lengths), **args)
    positions = packing.view_positions(call.inputs, cp, cp_rank)
    views = _view(log_probs, lengths, positions)
    return views, (_view(entropy, lengths, positions) if call.with_entropy else None)


MS_SWIFT = Family(
    name="ms_swift",
    # The marker is the package, not the log-prob utilities (2025-12-31, #7263): an older layout is then a
    # MissingUpstream naming what the record lacks, not "not a checkout".
    locate=Locate("swift", "swift/__init__.py", "LPH_MS_SWIFT_PATH", pypi="ms-swift"),
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
        Entry(  # until #9471: the CP gather is the RLHF mixin's (``_prepare``)
            "packed_log_probs",
            ("forward_step", "compute_logps_and_entropy_from_logits", "postprocess_cp", "pad_logps_back_to_batch"),
            packed,
            frozenset({"packed", "entropy", "temperature", "cp_zigzag"}),
        ),
        Entry(
            "token_policy_loss",
            ("loss_func",),
            policy.token_policy_loss,
            frozenset({"token_policy_loss"}),
            since="before #9641 (2026-06-29) loss_func takes one advantage per sequence ([B], unsqueezed), where the "
            "protocol's are per token: the record maps the per-token form only",
        ),
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
