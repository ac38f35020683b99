"""Call records: one protocol call as one value, instead of 11 to 13 keyword arguments retyped per adapter.

``FamilyTarget`` (``family.py``) writes the protocol's entry points once and
hands the family's translation a record: ``TokenCall``, ``PackedCall``,
``PolicyCall``, ``HiddenCall``, ``SamplingCall``, ``SamplingPackedCall``,
``TokenPolicyCall``. Each knows what it asks of a target (``needs()``: the
capabilities its non-default options need), which is the guard the kernel
applies once at the boundary, and the facts every translation reads alike
(the group's rank and size, this rank's vocabulary bounds).

The argument units are docs/targets.md's ("Units of every argument").
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch.distributed as dist

from harness.targets.protocol import KeptSet, PackedInputs, PolicyOptions
from harness.targets.upstream.megatron_stand_in import SINGLE_RANK


def size_and_rank(group) -> tuple[int, int]:
    """A process group's size and this process's rank in it (``None``: one rank)."""
    if group is None:
        return 1, 0
    return dist.get_world_size(group), dist.get_rank(group)


QKV_FORMATS = ("thd", "bshd")
CP_MODES = ("none", "zigzag", "allgather")
# The argument a capability is asked for by, to name it in the boundary's error (docs/targets.md, units).
ARGUMENTS = {
    "entropy": "with_entropy=True",
    "temperature": "temperature != 1",
    "bshd": "qkv_format='bshd' (give qkv_format='thd')",
    "cp_zigzag": "cp_mode='zigzag'",
    "cp_allgather": "cp_mode='allgather'",
    "response_only": "response_only=True",
    "loss_mask_only": "loss_mask_only=True",
    "donation": "donate_logits=True",
    "token_rows": "rows=",
    "hidden_tp": "a tp_group of more than one rank",
    "sampling_entropy": "with_entropy=True",
}


@dataclass(frozen=True)
class _Call:
    def replace(self, **changes):
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return type(self)(**{**values, **changes})

    def needs(self) -> set[str]:
        return set()

    def validate(self) -> None:
        """A value no implementation could take is a clear error naming the argument (before any capability)."""


@dataclass(frozen=True)
class _Logits(_Call):
    """What every logits-based call has: this rank's shard and the options of docs/targets.md."""

    logits: object
    tp_group: object
    chunk_size: int | None
    with_entropy: bool
    entropy_grad: bool
    temperature: float

    @property
    def group(self):
        """The TP group to hand upstream code: ``SINGLE_RANK`` stands for one rank (Megatron's stand-in)."""
        return SINGLE_RANK if self.tp_group is None else self.tp_group

    @property
    def tp(self) -> tuple[int, int]:
        return size_and_rank(self.tp_group)

    @property
    def vocab_bounds(self) -> tuple[int, int]:
        """This rank's shard of the vocabulary, ``[r * V_local, (r + 1) * V_local)``."""
        width, rank = self.logits.shape[-1], self.tp[1]
        return rank * width, (rank + 1) * width

    def needs(self) -> set[str]:
        wanted = set()
        if self.with_entropy:
            wanted.add("entropy")
        if self.temperature != 1.0:
            wanted.add("temperature")
        return wanted


@dataclass(frozen=True)
class TokenCall(_Logits):
    targets: object
    donate_logits: bool = False
    rows: object = None

    def needs(self) -> set[str]:
        wanted = super().needs() | {"token"}
        if self.donate_logits:
            wanted.add("donation")
        if self.rows is not None:
            wanted.add("token_rows")
        return wanted


@dataclass(frozen=True)
class PackedCall(_Logits):
    inputs: PackedInputs
    cp_group: object
    response_only: bool
    loss_mask_only: bool

    @property
    def cp(self) -> tuple[int, int]:
        return size_and_rank(self.cp_group)

    def validate(self) -> None:
        if self.inputs.qkv_format not in QKV_FORMATS:
            raise ValueError(f"qkv_format={self.inputs.qkv_format!r}: give one of {', '.join(map(repr, QKV_FORMATS))}")
        if self.inputs.cp_mode not in CP_MODES:
            raise ValueError(f"cp_mode={self.inputs.cp_mode!r}: give one of {', '.join(map(repr, CP_MODES))}")

    def needs(self) -> set[str]:
        wanted = super().needs() | {"packed"}
        if self.inputs.qkv_format == "bshd":
            wanted.add("bshd")
        if self.inputs.cp_mode != "none":
            wanted.add(f"cp_{self.inputs.cp_mode}")
        if self.response_only:
            wanted.add("response_only")
        if self.loss_mask_only:
            wanted.add("loss_mask_only")
        return wanted


@dataclass(frozen=True)
class PolicyCall(PackedCall):
    advantages: list = None
    old_log_probs: list = None
    eps_clip: float = 0.2
    eps_clip_high: float | None = None
    entropy_coef: float = 0.0
    options: PolicyOptions | None = None

    @property
    def clip_high(self) -> float:
        return self.eps_clip if self.eps_clip_high is None else self.eps_clip_high

    def needs(self) -> set[str]:
        wanted = (super().needs() - {"packed"}) | {"policy_loss"}
        return wanted | (self.options.capabilities() if self.options is not None else set())


@dataclass(frozen=True)
class HiddenCall(_Call):
    hidden: object
    weight: object
    targets: object
    tp_group: object
    chunk_size: int | None
    with_entropy: bool
    entropy_grad: bool
    temperature: float

    group = _Logits.group
    tp = _Logits.tp

    @property
    def vocab_bounds(self) -> tuple[int, int]:
        width, rank = self.weight.shape[0], self.tp[1]
        return rank * width, (rank + 1) * width

    def needs(self) -> set[str]:
        wanted = {"hidden"} | ({"hidden_tp"} if self.tp[0] > 1 else set())
        if self.with_entropy:
            wanted.add("entropy")
        if self.temperature != 1.0:
            wanted.add("temperature")
        return wanted


def _sampling_needs(kept: KeptSet, on_outside: str) -> set[str]:
    wanted = {"sampling", f"sampling_{kept.form}"}
    if kept.form == "derived" and kept.min_p is not None:
        wanted.add("sampling_min_p")
    return wanted


@dataclass(frozen=True)
class SamplingCall(TokenCall):
    kept: KeptSet = None
    on_outside: str = "error"

    def needs(self) -> set[str]:
        wanted = (super().needs() - {"token", "entropy"}) | _sampling_needs(self.kept, self.on_outside)
        return wanted | ({"sampling_entropy"} if self.with_entropy else set())


@dataclass(frozen=True)
class SamplingPackedCall(PackedCall):
    kept: KeptSet = None
    on_outside: str = "error"

    def needs(self) -> set[str]:
        wanted = (super().needs() - {"packed", "entropy"}) | _sampling_needs(self.kept, self.on_outside)
        return wanted | {"sampling_packed"} | ({"sampling_entropy"} if self.with_entropy else set())


@dataclass(frozen=True)
class TokenPolicyCall(_Call):
    log_probs: object
    old_log_probs: object
    advantages: object
    loss_mask: object
    eps_clip: float
    eps_clip_high: float | None
    entropy: object
    entropy_coef: float
    options: PolicyOptions | None = None

    def needs(self) -> set[str]:
        wanted = {"token_policy_loss"} | (self.options.capabilities() if self.options is not None else set())
        if self.entropy is not None and self.entropy_coef != 0:
            wanted.add("token_policy_entropy")
        return wanted
