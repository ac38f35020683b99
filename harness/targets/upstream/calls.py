"""Call records: one protocol call as one value, instead of 11 to 13 keyword arguments retyped per adapter.

A record is the one place a protocol method's arguments are written: which
method it serves, which arguments are positional, which the method fixes
(``policy_loss`` always differentiates the entropy), the rest keywords.
``FamilyTarget`` (``family.py``) generates its entry points from ``RECORDS``
and hands the family's translation the record. Each knows what it asks of a
target (``needs()``: the capabilities its non-default options need), which is
the guard the kernel applies once at the boundary, and the facts every
translation reads alike (the group's rank and size, this rank's vocabulary
bounds).

The argument units are docs/targets.md's ("Units of every argument").
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, dataclass, fields
from typing import ClassVar

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


@dataclass(frozen=True, kw_only=True)
class _Call:
    serves: ClassVar[str]  # the protocol method whose arguments it holds
    level: ClassVar[str]  # the capability that method needs at all
    positional: ClassVar[tuple[str, ...]]  # its positional arguments, in order; every other field is a keyword
    fixed: ClassVar[dict] = {}  # fields the method does not take: the value they always have

    def replace(self, **changes):
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return type(self)(**{**values, **changes})

    def needs(self) -> set[str]:
        return set()

    def validate(self) -> None:
        """A value no implementation could take is a clear error naming the argument (before any capability)."""


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class TokenCall(_Logits):
    serves, level, positional = "token_log_probs", "token", ("logits", "targets")

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


@dataclass(frozen=True, kw_only=True)
class PackedCall(_Logits):
    serves, level, positional = "packed_log_probs", "packed", ("logits", "inputs")

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


@dataclass(frozen=True, kw_only=True)
class PolicyCall(PackedCall):
    serves, level = "policy_loss", "policy_loss"
    fixed = {"entropy_grad": True}  # the loss differentiates its entropy term

    advantages: list
    old_log_probs: list
    eps_clip: float
    eps_clip_high: float | None
    entropy_coef: float
    options: PolicyOptions | None = None

    @property
    def clip_high(self) -> float:
        return self.eps_clip if self.eps_clip_high is None else self.eps_clip_high

    def needs(self) -> set[str]:
        wanted = (super().needs() - {"packed"}) | {"policy_loss"}
        return wanted | (self.options.capabilities() if self.options is not None else set())


@dataclass(frozen=True, kw_only=True)
class HiddenCall(_Call):
    serves, level, positional = "hidden_log_probs", "hidden", ("hidden", "weight", "targets")

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
        return _Logits.needs(self) | {"hidden"} | ({"hidden_tp"} if self.tp[0] > 1 else set())


def _sampling_needs(kept: KeptSet, on_outside: str) -> set[str]:
    wanted = {"sampling", f"sampling_{kept.form}"}
    if kept.form == "derived" and kept.min_p is not None:
        wanted.add("sampling_min_p")
    return wanted


@dataclass(frozen=True, kw_only=True)
class SamplingCall(TokenCall):
    serves, level, positional = "sampling_log_probs", "sampling", ("logits", "targets", "kept")
    fixed = {"donate_logits": False, "rows": None}  # the token path's options, not the sampler's

    kept: KeptSet
    on_outside: str

    def needs(self) -> set[str]:
        wanted = (super().needs() - {"token", "entropy"}) | _sampling_needs(self.kept, self.on_outside)
        return wanted | ({"sampling_entropy"} if self.with_entropy else set())


@dataclass(frozen=True, kw_only=True)
class SamplingPackedCall(PackedCall):
    serves, level, positional = "sampling_packed_log_probs", "sampling_packed", ("logits", "inputs", "kept")
    fixed = {"response_only": False, "loss_mask_only": False}  # only response rows are evaluated

    kept: KeptSet
    on_outside: str

    def needs(self) -> set[str]:
        wanted = (super().needs() - {"packed", "entropy"}) | _sampling_needs(self.kept, self.on_outside)
        return wanted | {"sampling_packed"} | ({"sampling_entropy"} if self.with_entropy else set())


@dataclass(frozen=True, kw_only=True)
class TokenPolicyCall(_Call):
    serves, level, positional = "token_policy_loss", "token_policy_loss", ("log_probs",)

    log_probs: object
    old_log_probs: object
    advantages: object
    loss_mask: object
    eps_clip: float
    eps_clip_high: float | None
    entropy: object
    entropy_coef: float
    options: PolicyOptions | None = None

    clip_high = PolicyCall.clip_high

    @property
    def chosen(self) -> PolicyOptions:
        """``options``, or the protocol's defaults (plain PPO) where none were given."""
        return self.options if self.options is not None else PolicyOptions()

    def as_delta(self, library: str) -> float | None:
        """The dual clip ``c`` as TRL's and ms-swift's ``delta``, a cap on the unclipped ratio: the same loss only
        when ``c >= 1 + clip_high``, so a smaller ``c`` is refused by name, never run as another loss."""
        c = self.chosen.dual_clip_c
        if c is not None and c < 1 + self.clip_high:
            raise ValueError(f"dual_clip_c={c}: {library}'s delta is the dual clip only if delta >= 1 + eps_clip_high")
        return c

    def per_batch(self, loss):
        """A ``seq-mean-token-mean`` loss as the protocol's ``sum-of-sample-mean`` where asked: the same, times B."""
        return loss * self.log_probs.shape[0] if self.chosen.aggregation == "sum-of-sample-mean" else loss

    def loss_type(self, token_mean: str) -> str:
        """The aggregation as TRL's ``loss_type`` (ms-swift's Megatron GRPO kept its names): ``grpo`` is the sequence
        mean (``per_batch`` makes it ``sum-of-sample-mean``), ``token_mean`` the library's token mean."""
        names = {"sum-of-sample-mean": "grpo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
        return {**names, "token-mean": token_mean}[self.chosen.aggregation]

    def needs(self) -> set[str]:
        wanted = {"token_policy_loss"} | self.chosen.capabilities()
        if self.entropy is not None and self.entropy_coef != 0:
            wanted.add("token_policy_entropy")
        return wanted


# Every protocol method a family serves, in the order a check's needs pick one (the first level it names).
RECORDS = (HiddenCall, SamplingPackedCall, SamplingCall, TokenPolicyCall, PolicyCall, PackedCall, TokenCall)


def signature(record) -> inspect.Signature:
    """The protocol method ``record`` serves, as the record writes it: ``self``, the positional arguments, then
    every other field but the fixed ones as a keyword (its default where the record has one)."""
    kind = inspect.Parameter
    parameters = [kind("self", kind.POSITIONAL_OR_KEYWORD)]
    parameters += [kind(name, kind.POSITIONAL_OR_KEYWORD) for name in record.positional]
    for f in fields(record):
        if f.name not in record.positional and f.name not in record.fixed:
            default = kind.empty if f.default is MISSING else f.default
            parameters.append(kind(f.name, kind.KEYWORD_ONLY, default=default))
    return inspect.Signature(parameters)
