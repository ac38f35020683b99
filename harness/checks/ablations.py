"""The conditions a failing Case may have, each with the Case without it: what the diagnosis ablates.

A condition is one way a Case departs from the plainest Case of its kind: the entropy gradient on, TP or CP
above 1, a dtype other than float32, chunking, a temperature, special values, several samples; a policy Case's
loss options away from their defaults; a sampling Case's kept-set form and each of its filters. Each
``Ablation`` names the condition as the diagnosis reports it ("needs tp >= 2") and removes it (None where the
Case does not have it). The replaying and judging is ``diagnosis.py``'s; a new condition is one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.cases import policy, sampling
from harness.cases.case import Case


@dataclass(frozen=True)
class Ablation:
    """One condition a Case may have, and the Case without it (None: the Case does not have it)."""

    dimension: str  # what "independent of" names: "tp", "dtype", ...
    condition: Callable[[Case, str], str]  # what "needs" names, for this Case and check: "tp >= 2", ...
    remove: Callable[[Case], Case | None]


def _policy_level(check: str) -> bool:
    return "policy" in check or "entropy_bonus" in check


def _entropy_condition(case: Case, check: str) -> str:
    if _policy_level(check) and case.entropy_coef == 0:
        return "entropy computed (coefficient 0)"
    return "entropy gradient on"


ABLATIONS = (
    Ablation(
        "entropy gradient",
        _entropy_condition,
        lambda c: c.with_(with_entropy=False, entropy_coef=0.0) if c.with_entropy else None,
    ),
    Ablation("tp", lambda c, _: "tp >= 2", lambda c: c.with_(tp=1) if c.tp > 1 else None),
    Ablation(
        "cp",
        lambda c, _: f"cp >= 2 ({c.cp_mode})",
        lambda c: c.with_(cp=1, cp_mode="none") if c.cp > 1 else None,
    ),
    Ablation(
        "dtype",
        lambda c, _: f"dtype {c.dtype}",
        lambda c: c.with_(dtype="float32") if c.dtype != "float32" else None,
    ),
    Ablation(
        "chunking",
        lambda c, _: f"chunking (chunk_size={c.chunk_size})",
        lambda c: c.with_(chunk_size=None) if c.chunk_size is not None else None,
    ),
    Ablation(
        "temperature",
        lambda c, _: f"temperature {c.temperature:g}",
        lambda c: c.with_(temperature=1.0) if c.temperature != 1.0 else None,
    ),
    Ablation(
        "special values",
        lambda c, _: f"special values ({', '.join(c.special)})",
        lambda c: c.with_(special=()) if c.special else None,
    ),
    Ablation(
        "several samples",
        lambda c, _: f"{len(c.samples)} samples",
        lambda c: c.with_(samples=c.samples[:1]) if len(c.samples) > 1 else None,
    ),
)


def _option_ablation(name: str, default) -> Ablation:
    """A policy Case's loss option back at its default (``harness.cases.policy``)."""

    def remove(case: Case) -> Case | None:
        values = policy.option_values(case) if "policy" in case.extra else {}
        if values.get(name, default) == default:
            return None
        return policy.with_options(case, **{name: default})

    return Ablation(name, lambda c, _: f"{name}={policy.option_values(c).get(name)!r}", remove)


_OTHER_FORM = {"csr": "dense", "dense": "csr", "derived": "csr"}


def _sampling_spec(case: Case) -> dict | None:
    return sampling.spec(case) if "sampling" in case.extra else None


def _form_ablation() -> Ablation:
    """A sampling Case's kept set handed in another form (derived -> the same K as CSR)."""

    def remove(case: Case) -> Case | None:
        given = _sampling_spec(case)
        return None if given is None else sampling.sampling_case(case, **{**given, "form": _OTHER_FORM[given["form"]]})

    return Ablation("kept-set form", lambda c, _: f"kept-set form {_sampling_spec(c)['form']}", remove)


def _filter_ablation(name: str) -> Ablation:
    """A derived kept set without one of its filters (top-k, top-p, min-p)."""

    def remove(case: Case) -> Case | None:
        given = _sampling_spec(case)
        if given is None or given[name] is None:
            return None
        return sampling.sampling_case(case, **{**given, name: None})

    return Ablation(name, lambda c, _: f"{name}={_sampling_spec(c)[name]!r}", remove)


OPTION_ABLATIONS = (
    _option_ablation("kind", "ppo"),
    _option_ablation("dual_clip_c", None),
    _option_ablation("kl_coef", 0.0),
    _option_ablation("kl_ratio_weighted", False),
    _option_ablation("rollout_correction", None),
    _option_ablation("aggregation", "sum-of-sample-mean"),
    _form_ablation(),
    _filter_ablation("top_k"),
    _filter_ablation("top_p"),
    _filter_ablation("min_p"),
)
ALL_ABLATIONS = ABLATIONS + OPTION_ABLATIONS
