"""Loading a slime (or miles) checkout's log-prob modules and detecting which API the revision has.

Split from the adapter (``adapter.py``, whose docstring describes the mapping):
this module executes the checkout's token-level, packed/policy-loss and CP
modules (parent packages as namespace packages, import-only dependencies stood
in), and reads the revision's API by FEATURE DETECTION, never by commit hash:
which functions the modules define, their signatures, and which ``args.*``
settings the packed path reads (their source text). What a revision lacks is
left out of ``capabilities()``, so the suite reports it UNSUPPORTED.

Two source layouts carry the same code (``LAYOUTS``), told apart by the files
the checkout holds:

* ``slime`` (THUDM/slime): ``slime/utils/ppo_utils.py`` (token level),
  ``slime/backends/megatron_utils/loss.py`` (packed path and policy loss),
  ``.../megatron_utils/cp_utils.py``; groups from Megatron's ``mpu``;
* ``miles`` (radixark/miles, the fork that renamed the package): the token
  functions in ``miles/backends/training_utils/loss_hub/math_utils.py``, the
  packed path in ``.../loss_hub/logit_processors.py``, the policy loss in
  ``.../loss_hub/losses.py``, ``.../training_utils/cp_utils.py``; groups from
  its own ``training_utils.parallel.get_parallel_state()`` (``.tp`` / ``.cp``
  with ``rank``, ``size``, ``group``), which the adapter sets per call.
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

_GATE_PARAMETERS = ("with_entropy_grad", "need_entropy_grad", "entropy_requires_grad")
# The packed entry point's own entropy-gate argument (miles); slime reads ``args.entropy_coef`` instead.
PACKED_GATE_PARAMETER = "entropy_requires_grad"


@dataclass(frozen=True)
class Layout:
    """Where one source layout keeps the modules the adapter loads (dotted module names)."""

    package: str
    token: str  # calculate_log_probs_and_entropy (or the older split functions)
    packed: str  # get_log_probs_and_entropy, get_responses
    policy: str  # policy_loss_function
    cp_utils: str  # get_sum_of_sample_mean
    parallel: str | None = None  # a module with set_parallel_state (None: Megatron's mpu alone)

    @property
    def packages(self) -> tuple[str, ...]:
        """Every parent package of the loaded modules (presented as namespace packages)."""
        names = set()
        for module in self.modules:
            parts = module.split(".")
            names |= {".".join(parts[:i]) for i in range(1, len(parts))}
        return tuple(sorted(names, key=len))

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.token, self.packed, self.policy, self.cp_utils)))

    def files(self) -> tuple[str, ...]:
        """The files under test, relative to the checkout root (what a history replay keys revisions by)."""
        return tuple(name.replace(".", "/") + ".py" for name in self.modules)


_SLIME_LOSS = "slime.backends.megatron_utils.loss"
_MILES_HUB = "miles.backends.training_utils.loss_hub"
LAYOUTS = (
    Layout("slime", "slime.utils.ppo_utils", _SLIME_LOSS, _SLIME_LOSS, "slime.backends.megatron_utils.cp_utils"),
    Layout(
        "miles",
        f"{_MILES_HUB}.math_utils",
        f"{_MILES_HUB}.logit_processors",
        f"{_MILES_HUB}.losses",
        "miles.backends.training_utils.cp_utils",
        parallel="miles.backends.training_utils.parallel",
    ),
)


def layout_of(root: Path) -> Layout | None:
    """The layout whose token-level module exists under ``root`` (None: neither slime nor miles)."""
    return next((layout for layout in LAYOUTS if (root / layout.files()[0]).is_file()), None)


# ---- loading ---------------------------------------------------------------------------------


def _as_sys_modules(modules: dict, package: str = "slime"):
    """The checkout's modules as the process's ``<package>*`` modules while the context lasts."""
    return as_sys_modules(modules, package)


_LOADED: dict[Path, dict] = {}


def load_modules(root: Path, layout: Layout | None = None) -> dict:
    """Execute the checkout's log-prob modules from ``root`` (cached per checkout); returns its package's modules."""
    if root in _LOADED:
        return _LOADED[root]
    layout = layout or layout_of(root) or LAYOUTS[0]
    stand_ins.install_megatron_fusions()
    modules = namespace_packages(root, layout.packages)
    with _as_sys_modules(modules, layout.package), stand_ins.absent_dependencies():
        _import(root, layout.token)
        for name in (*layout.modules[1:], *([layout.parallel] if layout.parallel else [])):
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
        if missing.split(".")[0] in ("slime", "miles"):
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
    layout: Layout = LAYOUTS[0]
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
    def detect(cls, modules: dict, layout: Layout = LAYOUTS[0]) -> SlimeAPI:
        ppo, loss, policy, cp_utils = (
            modules.get(name) for name in (layout.token, layout.packed, layout.policy, layout.cp_utils)
        )
        api = cls(modules, layout)
        api.token_fn = getattr(ppo, "calculate_log_probs_and_entropy", None)
        api.token_parameters = _parameters(api.token_fn)
        split = (getattr(ppo, "compute_log_probs", None), getattr(ppo, "compute_entropy_from_logits", None))
        api.split_fns = split if all(split) else None
        if loss is not None:
            api.packed_fn = getattr(loss, "get_log_probs_and_entropy", None)
            api.packed_parameters = _parameters(api.packed_fn)
            api.packed_gate_settings = _settings_read(api.packed_fn)
            api.packed_settings = api.packed_gate_settings | _settings_read(getattr(loss, "get_responses", None))
            api.policy_fn = getattr(policy, "policy_loss_function", None)
            if api.policy_fn is None:
                api.legacy_policy_fn = getattr(policy, "policy_loss_func", None)
            api.zigzag = hasattr(loss, "get_logits_and_tokens_offset_with_cp")
        api.sum_of_sample_mean_fn = getattr(cp_utils, "get_sum_of_sample_mean", None)
        return api

    @property
    def token_gate_parameter(self) -> str | None:
        return next((p for p in _GATE_PARAMETERS if p in self.token_parameters), None)

    @property
    def has_packed_gate(self) -> bool:
        return "entropy_coef" in self.packed_gate_settings or PACKED_GATE_PARAMETER in self.packed_parameters

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
