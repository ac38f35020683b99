"""Record every torch.distributed collective a rank issues (BUGS.md #5, the hang class).

Inside each rank process the plain collectives of ``torch.distributed`` and
the differentiable ones of ``torch.distributed.nn`` are wrapped so that each
call is recorded as (op, group ranks, shape, dtype, forward/backward) BEFORE
it is issued: a rank stuck inside a collective shows it as its last record.
The universal property is then a comparison: all ranks of a group must issue
the same sequence. That catches a mismatched collective without waiting for
it to hang.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
import torch.distributed as dist

PLAIN_OPS = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "reduce",
    "gather",
    "scatter",
)
AUTOGRAD_OPS = ("all_reduce", "all_gather", "all_to_all", "reduce_scatter", "broadcast", "all_to_all_single")


@dataclass(frozen=True)
class CollectiveRecord:
    op: str
    group_ranks: tuple
    shape: tuple
    dtype: str
    phase: str
    reduce_op: str = ""


def describe(record: CollectiveRecord | None) -> str:
    if record is None:
        return "(no collective issued)"
    op = f"{record.op}[{record.reduce_op}]" if record.reduce_op else record.op
    return f"{op} group={record.group_ranks} shape={record.shape} {record.dtype} {record.phase}"


def current_phase() -> str:
    """'backward' inside an autograd backward pass (the engine sets a graph task id), else 'forward'."""
    return "backward" if torch._C._current_graph_task_id() != -1 else "forward"


def _group_ranks(group) -> tuple:
    if group is None or group is dist.GroupMember.WORLD:
        return tuple(range(dist.get_world_size()))
    return tuple(dist.get_process_group_ranks(group))


def _first_tensor(args, kwargs):
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            return value[0]
    return None


def _reduce_op_name(args, kwargs) -> str:
    op = kwargs.get("op")
    if op is None:
        op = next((a for a in args if isinstance(a, dist.ReduceOp.RedOpType)), None)
    return str(op).split(".")[-1] if op is not None else ""


class CollectiveTracer:
    """Monkeypatches collectives in this process and records each call (see module docstring)."""

    def __init__(self, on_record=None):
        self.records: list[CollectiveRecord] = []
        self.on_record = on_record
        self._installed = False
        self._depth = 0

    def reset(self) -> None:
        self.records = []

    def last(self) -> CollectiveRecord | None:
        return self.records[-1] if self.records else None

    def _record(self, op: str, signature, args, kwargs, kind: str) -> None:
        bound = dict(kwargs)
        if signature is not None:
            binding = signature.bind_partial(*args, **kwargs)
            binding.apply_defaults()
            bound = binding.arguments
        tensor = _first_tensor(args, kwargs)
        record = CollectiveRecord(
            op=op if kind == "plain" else f"nn.{op}",
            group_ranks=_group_ranks(bound.get("group")),
            shape=tuple(tensor.shape) if tensor is not None else (),
            dtype=str(tensor.dtype).replace("torch.", "") if tensor is not None else "",
            phase=current_phase(),
            reduce_op=_reduce_op_name(args, {"op": bound.get("op")} if bound.get("op") is not None else {}),
        )
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    def _wrap(self, fn, op: str, kind: str):
        tracer = self
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # A differentiable collective issues a plain one inside; record the outer call only.
            if tracer._depth == 0:
                tracer._record(op, signature, args, kwargs, kind)
            tracer._depth += kind == "autograd"
            try:
                return fn(*args, **kwargs)
            finally:
                tracer._depth -= kind == "autograd"

        wrapper.__lph_traced__ = True
        return wrapper

    def install(self) -> CollectiveTracer:
        """Patch ``torch.distributed`` and ``torch.distributed.nn(.functional)`` (idempotent)."""
        if self._installed:
            return self
        import torch.distributed.nn as dist_nn
        import torch.distributed.nn.functional as dist_nn_functional

        for op in PLAIN_OPS:
            fn = getattr(dist, op, None)
            if fn is not None and not getattr(fn, "__lph_traced__", False):
                setattr(dist, op, self._wrap(fn, op, "plain"))
        for module in (dist_nn_functional, dist_nn):
            for op in AUTOGRAD_OPS:
                fn = getattr(module, op, None)
                if fn is not None and not getattr(fn, "__lph_traced__", False):
                    setattr(module, op, self._wrap(fn, op, "autograd"))
        self._installed = True
        return self


def compare_traces(traces: dict, groups) -> list[str]:
    """All ranks of each group must issue the same sequence; returns mismatch descriptions (empty = ok)."""
    problems = []
    for group in groups:
        group = tuple(group)
        projected = {rank: [r for r in traces[rank] if r.group_ranks == group] for rank in group if rank in traces}
        if len(projected) < 2:
            continue
        first_rank = min(projected)
        reference = projected[first_rank]
        for rank, sequence in sorted(projected.items()):
            if sequence == reference:
                continue
            index = next(
                (i for i, (a, b) in enumerate(zip(reference, sequence)) if a != b), min(len(reference), len(sequence))
            )
            ours = describe(reference[index]) if index < len(reference) else "(nothing: sequence ended)"
            theirs = describe(sequence[index]) if index < len(sequence) else "(nothing: sequence ended)"
            problems.append(
                f"group {group}: rank {first_rank} and rank {rank} diverge at collective #{index}: "
                f"rank {first_rank} issued {ours}; rank {rank} issued {theirs} "
                f"({len(reference)} vs {len(sequence)} collectives in total)"
            )
    return problems
