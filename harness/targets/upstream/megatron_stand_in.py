"""A minimal stand-in for the Megatron parallel-state lookups upstream log-prob code makes.

Upstream implementations (SkyRL's model utilities, slime's loss module) find
their tensor- and context-parallel groups through ``megatron.core.parallel_state``
(``mpu``) instead of taking them as arguments. Installing the real
``megatron-core`` would pull in CUDA-only dependencies, and its globals could
not follow the harness, which hands each job its TP and CP groups. So adapters
install this module under the Megatron names and set the groups per call:

    install()
    set_groups(tp_group, cp_group)
    ...upstream forward, then backward...

Lookups made in backward see the groups of the last ``set_groups`` of this
process: a rank runs one job at a time, so they are that job's.

A group of ``None`` means a single rank (the harness runs world 1 in-process,
with no process group, and fake tensors must never reach gloo). Upstream code
still calls ``torch.distributed`` with the group it looked up, so ``None`` is
presented as ``SINGLE_RANK``, a sentinel on which the collectives upstream
code uses are the identity (an all-reduce or all-gather over one rank) and the
rank/size queries answer 0 and 1. So is the world of that in-process rank
(no group named, no default group: a trainer process always has one, and
verl's engine asks ``get_rank()`` of it before a warning). Any other group
goes to torch unchanged.
"""

from __future__ import annotations

import sys
import types

import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

from harness.targets.upstream.placeholders import Placeholder


class _SingleRank:
    """The group of one rank, for code that insists on passing a group to ``torch.distributed``."""

    def __repr__(self) -> str:
        return "SINGLE_RANK"

    # a ProcessGroup's own queries, which Megatron's get_pg_rank / get_pg_size call once torch.distributed is up
    def rank(self) -> int:
        return 0

    def size(self) -> int:
        return 1


SINGLE_RANK = _SingleRank()

_current = {"tp": None, "cp": None}


def _group(kind: str):
    group = _current[kind]
    return SINGLE_RANK if group is None else group


def _size(kind: str) -> int:
    group = _current[kind]
    return 1 if group is None else dist.get_world_size(group)


def _rank(kind: str) -> int:
    group = _current[kind]
    return 0 if group is None else dist.get_rank(group)


def set_groups(tp_group, cp_group) -> None:
    """Make the Megatron lookups return these groups (``None``: a single rank) until the next call.

    Not a context manager on purpose: upstream backward passes look the groups
    up again after the forward call has returned.
    """
    _current.update(tp=tp_group, cp=cp_group)


def _identity_on_single_rank(original, *, result_of_single=None):
    """Wrap a ``torch.distributed`` function so that on ``SINGLE_RANK`` it is what one rank would do."""

    def wrapped(*args, **kwargs):
        group = kwargs.get("group")
        if group is None:
            group = next((a for a in args if isinstance(a, (_SingleRank, dist.ProcessGroup))), None)
        if isinstance(group, _SingleRank) or (group is None and not dist.is_initialized()):
            return result_of_single(*args, **kwargs) if result_of_single else None
        return original(*args, **kwargs)

    wrapped.__wrapped__ = original
    wrapped.__lph_single_rank__ = True
    return wrapped


def _single_all_gather(tensor_list, tensor, *args, **kwargs):
    tensor_list[0].copy_(tensor)


def _single_all_gather_into_tensor(output, tensor, *args, **kwargs):
    output.copy_(tensor.reshape(output.shape))


def _single_all_to_all_single(output, tensor, *args, **kwargs):
    output.copy_(tensor.reshape(output.shape))


def _single_reduce_scatter(output, input_list, *args, **kwargs):
    output.copy_(input_list[0])


def _single_nn_all_reduce(tensor, *args, **kwargs):
    return tensor


def _single_nn_all_gather(tensor, *args, **kwargs):
    return (tensor,)


_SINGLE_RANK_BEHAVIOUR = {
    (dist, "all_reduce"): None,
    (dist, "broadcast"): None,
    (dist, "barrier"): None,
    (dist, "all_gather"): _single_all_gather,
    (dist, "all_gather_into_tensor"): _single_all_gather_into_tensor,
    (dist, "all_to_all_single"): _single_all_to_all_single,
    (dist, "reduce_scatter"): _single_reduce_scatter,
    (dist, "get_world_size"): lambda *a, **k: 1,
    (dist, "get_rank"): lambda *a, **k: 0,
    (dist_nn, "all_reduce"): _single_nn_all_reduce,
    (dist_nn, "all_gather"): _single_nn_all_gather,
}


def _patch_single_rank_collectives() -> None:
    for (module, name), behaviour in _SINGLE_RANK_BEHAVIOUR.items():
        original = getattr(module, name)
        if getattr(original, "__lph_single_rank__", False):
            continue
        setattr(module, name, _identity_on_single_rank(original, result_of_single=behaviour))
    # torch.distributed.nn re-exports the functional collectives under its own names.
    import torch.distributed.nn as dist_nn_package

    dist_nn_package.all_reduce = dist_nn.all_reduce
    dist_nn_package.all_gather = dist_nn.all_gather


def _parallel_state_module() -> types.ModuleType:
    state = types.ModuleType("megatron.core.parallel_state")
    state.__doc__ = "harness stand-in: the groups of the current job (harness/targets/upstream/megatron_stand_in.py)"
    state.get_tensor_model_parallel_group = lambda *a, **k: _group("tp")
    state.get_tensor_model_parallel_world_size = lambda *a, **k: _size("tp")
    state.get_tensor_model_parallel_rank = lambda *a, **k: _rank("tp")
    state.get_context_parallel_group = lambda *a, **k: _group("cp")
    state.get_context_parallel_world_size = lambda *a, **k: _size("cp")
    state.get_context_parallel_rank = lambda *a, **k: _rank("cp")
    return state


def install() -> types.ModuleType:
    """Register the stand-in as ``megatron.core.parallel_state`` (and ``mpu``) unless real Megatron is loaded.

    Returns the parallel-state module in use. Idempotent.
    """
    _patch_single_rank_collectives()
    existing = sys.modules.get("megatron.core.parallel_state")
    if existing is not None:
        return existing
    state = _parallel_state_module()
    megatron = sys.modules.setdefault("megatron", types.ModuleType("megatron"))
    core = sys.modules.setdefault("megatron.core", types.ModuleType("megatron.core"))
    megatron.core = core
    core.parallel_state = core.mpu = state
    sys.modules["megatron.core.parallel_state"] = state
    sys.modules["megatron.core.mpu"] = state
    return state


# The record entry of every family whose code finds its groups through ``mpu`` (SkyRL, NeMo-RL, slime, verl).
PLACEHOLDER = Placeholder("megatron.core.parallel_state", "the job's TP/CP groups", lambda name: install(), "process")
