"""Target adapter for SkyRL's Megatron log-prob and entropy code (NovaSky-AI/SkyRL).

What is checked: ``DistributedLogprob`` / ``ChunkedDistributedLogprob`` (the
vocab-parallel log-prob autograd Functions) and ``vocab_parallel_entropy`` from
``skyrl/backends/skyrl_train/distributed/megatron/model_utils.py``, loaded BY
FILE PATH at run time from

* the directory in ``LPH_SKYRL_PATH`` (a source checkout's root, or any
  directory holding the ``skyrl`` package), else
* the installed ``skyrl`` package (``pip install --no-deps skyrl==X``: its
  heavy dependencies are not needed for this file).

Nothing of SkyRL is copied here. Its module imports
``megatron.core.parallel_state``; the harness stand-in
(``megatron_stand_in``) answers those lookups with the job's groups.

Mapping SkyRL's conventions onto the harness's (docs/targets.md):

* SkyRL's logits are ``[B, S, V_local]`` and its targets ``[B, S]``, with the
  shard given as ``vocab_start_index`` / ``vocab_end_index``: the harness's
  ``[rows, V_local]`` shard is presented as ``B = 1`` by ``unsqueeze`` (a view,
  so in-place edits SkyRL makes are seen by the checks), and the shard bounds
  are ``tp_rank * V_local`` and ``(tp_rank + 1) * V_local``;
* the harness hands each row its own target, so the Functions are called
  directly: SkyRL's wrapper ``from_parallel_logits_to_logprobs`` rolls targets
  and drops the last position, which has no harness equivalent. With
  ``chunk_size`` set the chunked Function runs, as SkyRL's wrapper runs it for
  a sequence longer than the chunk;
* SkyRL's entropy is ``H = -sum p log p`` (positive), the harness's sign;
* the entropy-gradient gate is applied the way a SkyRL caller does: entropy
  computed under ``torch.no_grad()`` when its gradient is not wanted;
* its entropy forward wraps a helper in ``torch.compile``; on CPU it runs
  eagerly (dynamo disabled for the call), which changes no value.

Not declared, hence UNSUPPORTED in the verdict table: ``temperature`` (SkyRL
scales logits before these functions, outside the code under test),
``packed`` / ``policy_loss`` and the CP modes (SkyRL's packed entry point
takes ``cu_seqlens`` over a CP-sharded, rolled stream and computes no entropy;
its policy loss lives in its trainer), and ``donation``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from functools import cached_property
from pathlib import Path

import torch
import torch.distributed as dist

from harness.targets import megatron_stand_in
from harness.targets.protocol import Target

MODEL_UTILS = Path("skyrl/backends/skyrl_train/distributed/megatron/model_utils.py")
PATH_VARIABLE = "LPH_SKYRL_PATH"


def skyrl_root() -> Path:
    """The directory holding the ``skyrl`` package: ``LPH_SKYRL_PATH`` or the installed package's parent."""
    override = os.environ.get(PATH_VARIABLE)
    if override:
        root = Path(override).expanduser().resolve()
        if not (root / MODEL_UTILS).is_file():
            raise FileNotFoundError(f"{PATH_VARIABLE}={override}: no {MODEL_UTILS} under it")
        return root
    spec = importlib.util.find_spec("skyrl")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "skyrl is not installed: `pip install --no-deps skyrl==X` (or `nox -s upstream -- skyrl==X`), "
            f"or set {PATH_VARIABLE} to a checkout"
        )
    root = Path(list(spec.submodule_search_locations)[0]).parent
    if not (root / MODEL_UTILS).is_file():
        raise FileNotFoundError(f"the installed skyrl package has no {MODEL_UTILS}: is it a version before 0.2?")
    return root


def _version(root: Path) -> str:
    """The skyrl version at ``root``: its dist-info (an installed or unpacked wheel), else its pyproject."""
    from importlib.metadata import distributions

    for dist_info in distributions(path=[str(root)]):
        if dist_info.metadata["Name"] == "skyrl":
            return dist_info.version
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        return tomllib.loads(pyproject.read_text()).get("project", {}).get("version", "unknown")
    return "unknown"


def load_model_utils(root: Path):
    """Execute SkyRL's model utilities from ``root`` as a private module (never imported as ``skyrl``)."""
    megatron_stand_in.install()
    module_spec = importlib.util.spec_from_file_location("lph_upstream_skyrl_model_utils", root / MODEL_UTILS)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    for name in ("DistributedLogprob", "ChunkedDistributedLogprob", "vocab_parallel_entropy"):
        if not hasattr(module, name):
            raise AttributeError(f"{root / MODEL_UTILS} defines no {name}: this SkyRL version is not supported")
    return module


class SkyRLTarget(Target):
    """SkyRL's vocab-parallel log-prob and entropy Functions (see the module docstring)."""

    capabilities = frozenset({"token", "entropy", "entropy_gate", "chunking"})

    def __init__(self, root: Path | None = None):
        self.root = skyrl_root() if root is None else Path(root)
        self.name = f"skyrl-{_version(self.root)}"

    @cached_property
    def _module(self):
        return load_model_utils(self.root)

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        if temperature != 1.0:
            raise ValueError(f"{self.name}: temperature={temperature} is not part of the code under test")
        module = self._module
        megatron_stand_in.set_groups(tp_group, None)
        group = megatron_stand_in.SINGLE_RANK if tp_group is None else tp_group
        tp_rank = 0 if tp_group is None else dist.get_rank(tp_group)
        vocab_local = logits.shape[-1]
        start, end = tp_rank * vocab_local, (tp_rank + 1) * vocab_local
        batched, batched_targets = logits.unsqueeze(0), targets.unsqueeze(0)
        if chunk_size is None:
            log_probs = module.DistributedLogprob.apply(batched, batched_targets, start, end, group, False)
        else:
            log_probs = module.ChunkedDistributedLogprob.apply(
                batched, batched_targets, start, end, chunk_size, group, False
            )
        entropy = None
        if with_entropy:
            with (
                torch._dynamo.config.patch(disable=True),
                contextlib.nullcontext() if entropy_grad else torch.no_grad(),
            ):
                entropy = module.vocab_parallel_entropy(batched).squeeze(0)
        return log_probs.squeeze(0), entropy
