"""Loading a slime checkout's log-prob modules and detecting which API the revision has.

Split from the adapter (``slime.py``, whose docstring describes the mapping):
this module executes ``slime.utils.ppo_utils``, ``...megatron_utils.loss`` and
``...megatron_utils.cp_utils`` from the checkout (parent packages as namespace
packages, import-only dependencies stood in), and reads the revision's API by
FEATURE DETECTION, never by commit hash: which functions the modules define,
their signatures, and which ``args.*`` settings the packed path reads (their
source text). What a revision lacks is left out of ``capabilities()``, so the
suite reports it UNSUPPORTED.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path

from harness.targets.slime import stand_ins
from harness.targets.upstream.checkout import as_sys_modules, namespace_packages
from harness.targets.upstream.symbols import MissingUpstreamImport

PPO_UTILS = "slime.utils.ppo_utils"
LOSS = "slime.backends.megatron_utils.loss"
CP_UTILS = "slime.backends.megatron_utils.cp_utils"
_PACKAGES = ("slime", "slime.utils", "slime.backends", "slime.backends.megatron_utils")
_GATE_PARAMETERS = ("with_entropy_grad", "need_entropy_grad")


# ---- loading ---------------------------------------------------------------------------------


def _as_sys_modules(modules: dict):
    """slime's modules as the process's ``slime*`` modules while the context lasts (``checkout.as_sys_modules``)."""
    return as_sys_modules(modules, "slime")


_LOADED: dict[Path, dict] = {}


def load_modules(root: Path) -> dict:
    """Execute slime's log-prob modules from ``root`` (cached per checkout); returns the ``slime*`` modules."""
    if root in _LOADED:
        return _LOADED[root]
    stand_ins.install_megatron_fusions()
    modules = namespace_packages(root, _PACKAGES)
    with _as_sys_modules(modules), stand_ins.absent_dependencies():
        _import(root, PPO_UTILS)
        for name in (LOSS, CP_UTILS):
            if root.joinpath(*name.split(".")).with_suffix(".py").is_file():
                _import(root, name)
    _LOADED[root] = modules
    return modules


def _import(root: Path, name: str) -> None:
    """Import ``name`` from the checkout; a package neither installed nor stood in is a ``MissingUpstreamImport``."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or str(exc)
        if missing.split(".")[0] == "slime":
            raise  # the checkout itself lacks a module: not a dependency to stand in
        raise MissingUpstreamImport(
            missing,
            f"slime's {name} (checkout {root}, see the traceback for the importing line)",
            "Install it; or, if slime's log-prob code only imports it, stand it in: a third-party package in "
            "IMPORT_ONLY, a megatron.* module in MEGATRON_IMPORT_ONLY (harness/targets/slime/stand_ins.py).",
        ) from exc


# ---- feature detection ------------------------------------------------------------------------


def _parameters(fn) -> set[str]:
    return set(inspect.signature(fn).parameters) if fn is not None else set()


def _settings_read(*functions) -> set[str]:
    """The ``args.<name>`` / ``getattr(args, "<name>"...)`` settings these functions' source reads."""
    names: set[str] = set()
    for fn in functions:
        if fn is None:
            continue
        source = inspect.getsource(fn)
        names |= set(re.findall(r"\bargs\.(\w+)", source))
        names |= set(re.findall(r"getattr\(\s*args\s*,\s*[\"'](\w+)[\"']", source))
    return names


@dataclass
class SlimeAPI:
    """What the loaded revision provides, found by inspecting its modules."""

    modules: dict
    token_fn: object = None  # calculate_log_probs_and_entropy
    token_parameters: set = field(default_factory=set)
    split_fns: tuple | None = None  # (compute_log_probs, compute_entropy_from_logits)
    packed_fn: object = None  # get_log_probs_and_entropy
    packed_parameters: set = field(default_factory=set)
    packed_settings: set = field(default_factory=set)
    packed_gate_settings: set = field(default_factory=set)
    policy_fn: object = None  # policy_loss_function
    # The first revisions' name and form (2025-06-18 .. 07-03): ``policy_loss_func(args, batch, num_microbatches,
    # logits)``, which builds its own sample mean and divides the loss by the CP size for Megatron to multiply back.
    legacy_policy_fn: object = None
    sum_of_sample_mean_fn: object = None  # get_sum_of_sample_mean
    zigzag: bool = False

    @classmethod
    def detect(cls, modules: dict) -> SlimeAPI:
        ppo, loss, cp_utils = (modules.get(name) for name in (PPO_UTILS, LOSS, CP_UTILS))
        api = cls(modules)
        api.token_fn = getattr(ppo, "calculate_log_probs_and_entropy", None)
        api.token_parameters = _parameters(api.token_fn)
        split = (getattr(ppo, "compute_log_probs", None), getattr(ppo, "compute_entropy_from_logits", None))
        api.split_fns = split if all(split) else None
        if loss is not None:
            api.packed_fn = getattr(loss, "get_log_probs_and_entropy", None)
            api.packed_parameters = _parameters(api.packed_fn)
            api.packed_gate_settings = _settings_read(api.packed_fn)
            api.packed_settings = api.packed_gate_settings | _settings_read(getattr(loss, "get_responses", None))
            api.policy_fn = getattr(loss, "policy_loss_function", None)
            if api.policy_fn is None:
                api.legacy_policy_fn = getattr(loss, "policy_loss_func", None)
            api.zigzag = hasattr(loss, "get_logits_and_tokens_offset_with_cp")
        api.sum_of_sample_mean_fn = getattr(cp_utils, "get_sum_of_sample_mean", None)
        return api

    @property
    def token_gate_parameter(self) -> str | None:
        return next((p for p in _GATE_PARAMETERS if p in self.token_parameters), None)

    @property
    def has_packed_gate(self) -> bool:
        return "entropy_coef" in self.packed_gate_settings

    @property
    def has_bshd(self) -> bool:
        return "qkv_format" in self.packed_settings and "max_seq_lens" in self.packed_parameters

    def capabilities(self) -> frozenset:
        caps = set()
        token = self.token_fn is not None or self.split_fns is not None
        if token:
            caps |= {"token", "entropy"}
        if self.packed_fn is not None:
            caps |= {"packed", "entropy"}
            if self.sum_of_sample_mean_fn is not None and (self.policy_fn or self.legacy_policy_fn) is not None:
                caps.add("policy_loss")
            if "rollout_temperature" in self.packed_settings:
                caps.add("temperature")
            if self.has_bshd:
                caps.add("bshd")
            if self.zigzag:
                caps.add("cp_zigzag")
            if "allgather_cp" in self.packed_settings:
                caps.add("cp_allgather")
            token_gate = self.token_gate_parameter is not None or (self.token_fn is None and self.split_fns)
            if self.has_packed_gate and (token_gate or not token):
                caps.add("entropy_gate")
            if "log_probs_chunk_size" in self.packed_settings and (not token or "chunk_size" in self.token_parameters):
                caps.add("chunking")
        elif token and "chunk_size" in self.token_parameters:
            caps.add("chunking")
        return frozenset(caps)
