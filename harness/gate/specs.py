"""SPEC strings (what a maintainer types) to the target the suite runs, and its environment.

* ``impl``: this project's implementation (torch backend); ``impl-triton``:
  the same on its Triton kernels (Triton's CPU interpreter on a CPU run);
* ``skyrl==X``, ``verl==X``: SkyRL / verl X from PyPI, installed WITHOUT dependencies into its own
  directory (``.packages/skyrl-X``) and loaded by path, so a base and a PR on
  two versions can live side by side in one virtualenv;
* ``skyrl=PATH``, ``slime=PATH``, ``nemo_rl=PATH``, ``miles=PATH``: a checkout, loaded by path
  (``miles``: radixark/miles, slime's fork, through the slime adapter);
* ``vllm=PATH``: a vLLM checkout; only its sampler's top-k / top-p function is
  loaded, a sampling target of derived form (its other checks read UNSUPPORTED);
* ``liger==X`` / ``liger=PATH``, ``trl==X`` / ``trl=PATH``, ``te==X`` /
  ``te=PATH``: the same, for Liger-Kernel (PyPI ``liger-kernel``), TRL and
  TransformerEngine (PyPI ``transformer-engine``, whose wheel is pure Python);
* ``ms_swift==X`` / ``ms_swift=PATH``: ms-swift (PyPI ``ms-swift``); its
  log-probs run Megatron-core's cross entropy from the checkout in
  ``LPH_MEGATRON_PATH``, which the caller sets;
* ``module:attr`` or ``path/to/adapter.py:attr``: any adapter (docs/targets.md);
* ``mutant=NAME``: impl/ carrying one re-created historic bug (the gate's own tests and demos).

A SPEC's family names its shipped expectations file (``expectations/<family>.toml``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness import ROOT

PACKAGES = ROOT / ".packages"
# The upstream families the gate knows by name (SPEC ``family==X`` / ``family=PATH``); their expectation files are
# ``expectations/<family>.toml``.
ADAPTERS = {
    "skyrl": "harness.targets.skyrl.token:SkyRLTarget",
    # the sampling subclasses: the parent adapters plus sampling_log_probs where the revision has it (docs/targets.md)
    "slime": "harness.targets.slime.sampling:SlimeSamplingTarget",
    "nemo_rl": "harness.targets.nemo_rl.sampling:NemoRLSamplingTarget",
    "miles": "harness.targets.slime.adapter:MilesTarget",
    "verl": "harness.targets.verl.token:VerlTarget",
}
CHECKOUT_VARIABLES = {
    "skyrl": "LPH_SKYRL_PATH",
    "slime": "LPH_SLIME_PATH",
    "nemo_rl": "LPH_NEMO_RL_PATH",
    "miles": "LPH_MILES_PATH",
    "verl": "LPH_VERL_PATH",
}
PYPI = {"skyrl", "verl"}
# Families beyond the Megatron trainers: Liger (token + hidden), TRL (helpers, chunked LM head); docs/targets.md.
ADAPTERS.update(
    {
        "liger": "harness.targets.liger.family:LigerFamilyTarget",
        "trl": "harness.targets.trl.family:TRLFamilyTarget",
        "te": "harness.targets.transformer_engine.token:TECrossEntropyTarget",
        "ms_swift": "harness.targets.ms_swift.token:MsSwiftTarget",
    }
)
CHECKOUT_VARIABLES.update(
    {"liger": "LPH_LIGER_PATH", "trl": "LPH_TRL_PATH", "te": "LPH_TE_PATH", "ms_swift": "LPH_MS_SWIFT_PATH"}
)
PYPI |= {"liger", "trl", "te", "ms_swift"}
# A family whose PyPI distribution is named otherwise (``liger==X`` installs ``liger-kernel==X``).
PIP_NAMES = {"liger": "liger-kernel", "te": "transformer-engine", "ms_swift": "ms-swift"}
# The engine side of sampling replay: vLLM's top-k / top-p, by checkout only (its wheel is a CUDA build).
ADAPTERS["vllm"] = "harness.targets.vllm.sampler:VllmSamplerTarget"
CHECKOUT_VARIABLES["vllm"] = "LPH_VLLM_PATH"


@dataclass
class ResolvedSpec:
    spec: str
    target: str
    slug: str
    family: str | None = None
    env: dict = field(default_factory=dict)
    pip_requirement: str | None = None  # installed into ``env``'s path before the run


def slug_of(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "target"


def git_revision(path: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return path.name


def resolve(spec: str) -> ResolvedSpec:
    """Parse a SPEC; a malformed one is a clear error listing the accepted forms."""
    if spec in ("impl", "impl-triton"):
        return ResolvedSpec(spec, spec, spec)
    if spec.startswith("mutant="):
        return _mutant(spec)
    name, sep, value = spec.partition("=")
    if name in PYPI and sep and value.startswith("="):
        version = value[1:]
        directory = PACKAGES / f"{name}-{version}"
        return ResolvedSpec(
            spec,
            ADAPTERS[name],
            f"{name}-{version}",
            name,
            {CHECKOUT_VARIABLES[name]: str(directory)},
            pip_requirement=f"{PIP_NAMES.get(name, name)}=={version}",
        )
    if name in CHECKOUT_VARIABLES and sep:
        path = Path(value).expanduser().resolve()
        if not path.is_dir():
            raise ValueError(f"{spec}: {path} is not a directory (give the root of a {name} checkout)")
        return ResolvedSpec(
            spec, ADAPTERS[name], f"{name}-{git_revision(path)}", name, {CHECKOUT_VARIABLES[name]: str(path)}
        )
    if ":" in spec and not sep:
        return ResolvedSpec(spec, spec, slug_of(spec))
    raise ValueError(
        f"unknown SPEC {spec!r}: expected impl, impl-triton, mutant=NAME, "
        f"{', '.join(sorted(f'{name}==X' for name in PYPI))}, "
        f"{', '.join(sorted(f'{name}=PATH' for name in CHECKOUT_VARIABLES))}, module:attr or path/to/adapter.py:attr"
    )


def _mutant(spec: str) -> ResolvedSpec:
    """``mutant=NAME``: impl/ with one historic bug re-created (harness/mutants/catalog.py), for demos and tests."""
    from harness.mutants.catalog import by_name

    name = spec.partition("=")[2]
    try:
        by_name(name)
    except KeyError as exc:
        raise ValueError(str(exc.args[0])) from None
    return ResolvedSpec(spec, "impl", f"mutant-{name}", None, {"LPH_MUTANT": name})


def install(resolved: ResolvedSpec) -> None:
    """Install a PyPI SPEC into its own directory (once), without dependencies."""
    if resolved.pip_requirement is None:
        return
    directory = Path(next(iter(resolved.env.values())))
    if directory.is_dir() and any(directory.iterdir()):
        return
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(directory)]
    subprocess.run([*command, resolved.pip_requirement], check=True)
