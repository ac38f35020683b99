"""Record every torch.distributed collective a rank issues (docs/bugs.md #5, the hang class).

A collective that some ranks of a group issue and others do not is a hang in
waiting: it may happen to pair with an unrelated collective and pass, or block
forever. Inside each rank process the plain collectives of
``torch.distributed`` and the differentiable ones of ``torch.distributed.nn``
(and ``.functional``) are wrapped so that each call is recorded as
(op, group ranks, shape, dtype, forward/backward) BEFORE it is issued, so a
rank stuck inside a collective shows it as its last record. The universal
property is then a plain comparison, ``compare_traces``: all ranks of a group
issue the same sequence. That catches a mismatch without waiting for a hang.

The differentiable collectives are autograd Functions that call the plain
``torch.distributed.*`` functions inside their forward and backward; those
inner calls are recorded too, which is how a backward all-reduce shows up,
with phase ``'backward'``.
"""

from __future__ import annotations

import functools
import inspect
from collections import Counter
from collections.abc import Callable
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
    # Private, but called by the backward of torch.distributed.nn's all-gather.
    "_all_gather_base",
    "_reduce_scatter_base",
)
AUTOGRAD_OPS = (
    "all_reduce",
    "all_gather",
    "all_to_all",
    "all_to_all_single",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
)
AUTOGRAD_PREFIX = "nn."
_TRACED = "__lph_traced__"


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective as issued by one rank; equal records on all ranks of a group mean they pair up."""

    op: str
    group_ranks: tuple
    shape: tuple
    dtype: str
    phase: str
    reduce_op: str = ""


def describe(record: CollectiveRecord | None) -> str:
    """One line, e.g. ``all_reduce[SUM] group=(0, 1) shape=(4, 3) float32 backward``, for hang and mismatch reports."""
    if record is None:
        return "(no collective issued)"
    op = f"{record.op}[{record.reduce_op}]" if record.reduce_op else record.op
    parts = [op, f"group={record.group_ranks}", f"shape={record.shape}", record.dtype, record.phase]
    return " ".join(part for part in parts if part)


def current_phase() -> str:
    """'backward' while the autograd engine runs a graph task on this thread, else 'forward'.

    The engine sets a thread-local graph task id for the duration of
    ``backward()``/``autograd.grad`` (-1 otherwise); a reentrant checkpoint's
    recomputation therefore counts as backward, which is when it is issued.
    """
    return "backward" if torch._C._current_graph_task_id() != -1 else "forward"


def _group_ranks(group) -> tuple:
    if group is None or group is dist.GroupMember.WORLD:
        return tuple(range(dist.get_world_size()))
    return tuple(dist.get_process_group_ranks(group))


def _first_tensor(values) -> torch.Tensor | None:
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            return value[0]
    return None


def _reduce_op_name(op) -> str:
    if op is None:
        return ""
    return getattr(op, "name", None) or str(op).split(".")[-1]


def _bind(signature: inspect.Signature | None, args, kwargs) -> dict:
    """The call's arguments by name, defaults included; a call the function would reject keeps its kwargs."""
    if signature is None:
        return dict(kwargs)
    try:
        binding = signature.bind(*args, **kwargs)
    except TypeError:
        return dict(kwargs)
    binding.apply_defaults()
    return dict(binding.arguments)


class CollectiveTracer:
    """Monkeypatches the collectives of this process and records each call before issuing it.

    ``on_record(record)`` is called after each record is appended, and
    ``on_return(record)`` when the call returns (or raises); the rank pool
    uses them to mirror the latest collective, and whether the rank is still
    inside it, into shared memory, where the parent can read them even while
    the rank is stuck inside that call (harness/ranks/deadlock.py).
    """

    def __init__(
        self,
        on_record: Callable[[CollectiveRecord], None] | None = None,
        on_return: Callable[[CollectiveRecord], None] | None = None,
    ):
        self.records: list[CollectiveRecord] = []
        self.per_group: Counter = Counter()  # collectives issued per group since the last reset
        self.on_record = on_record
        self.on_return = on_return
        self._installed = False

    def reset(self) -> None:
        self.records = []
        self.per_group = Counter()

    def last(self) -> CollectiveRecord | None:
        return self.records[-1] if self.records else None

    def record(self, op: str, arguments: dict, values) -> CollectiveRecord:
        tensor = _first_tensor(values)
        record = CollectiveRecord(
            op=op,
            group_ranks=_group_ranks(arguments.get("group")),
            shape=tuple(tensor.shape) if tensor is not None else (),
            dtype=str(tensor.dtype).removeprefix("torch.") if tensor is not None else "",
            phase=current_phase(),
            reduce_op=_reduce_op_name(arguments.get("op")),
        )
        self.records.append(record)
        self.per_group[record.group_ranks] += 1
        if self.on_record is not None:
            self.on_record(record)
        return record

    def _wrap(self, fn: Callable, op: str) -> Callable:
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None

        @functools.wraps(fn)
        def traced(*args, **kwargs):
            record = self.record(op, _bind(signature, args, kwargs), list(args) + list(kwargs.values()))
            try:
                return fn(*args, **kwargs)
            finally:
                if self.on_return is not None:
                    self.on_return(record)

        setattr(traced, _TRACED, True)
        return traced

    def _patch(self, module, names, prefix: str = "") -> None:
        for name in names:
            fn = getattr(module, name, None)
            if fn is not None and not getattr(fn, _TRACED, False):
                setattr(module, name, self._wrap(fn, prefix + name))

    def install(self) -> CollectiveTracer:
        """Patch ``torch.distributed`` and ``torch.distributed.nn(.functional)``; idempotent, returns self.

        Only the module attributes are patched: code that looks collectives up
        as ``dist.all_reduce`` at call time (torch.distributed.nn does) is
        traced, a name bound by ``from torch.distributed import all_reduce``
        before ``install()`` is not. The rank pool installs at start-up,
        before any job module is imported.
        """
        if self._installed:
            return self
        import torch.distributed.nn as dist_nn
        import torch.distributed.nn.functional as dist_nn_functional

        self._patch(dist, PLAIN_OPS)
        for module in (dist_nn_functional, dist_nn):
            self._patch(module, AUTOGRAD_OPS, AUTOGRAD_PREFIX)
        self._installed = True
        return self


def _divergence(group: tuple, first: int, reference: list, rank: int, sequence: list) -> str:
    index = next((i for i, (a, b) in enumerate(zip(reference, sequence)) if a != b), min(len(reference), len(sequence)))
    ours = describe(reference[index]) if index < len(reference) else "(nothing: its sequence ended)"
    theirs = describe(sequence[index]) if index < len(sequence) else "(nothing: its sequence ended)"
    return (
        f"group {group}: rank {first} and rank {rank} diverge at collective #{index}: "
        f"rank {first} issued {ours}; rank {rank} issued {theirs} "
        f"({len(reference)} vs {len(sequence)} collectives on this group in total)"
    )


def compare_traces(traces: dict[int, list[CollectiveRecord]], groups: list[tuple[int, ...]]) -> list[str]:
    """Universal property: all ranks of each group issue the same sequence on it.

    Each member's trace is projected to the records of that group and
    compared with the lowest member's. Returns one human-readable line per
    diverging (group, rank), naming the first differing index and both
    records; an empty list means consistent. Members absent from ``traces``
    are skipped.
    """
    problems = []
    for group in map(tuple, groups):
        projected = {rank: [r for r in traces[rank] if r.group_ranks == group] for rank in group if rank in traces}
        if len(projected) < 2:
            continue
        first = min(projected)
        for rank in sorted(projected):
            if projected[rank] != projected[first]:
                problems.append(_divergence(group, first, projected[first], rank, projected[rank]))
    return problems
