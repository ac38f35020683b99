"""Target adapter for NVIDIA-NeMo/RL's vocab-parallel log-prob and entropy code, loaded from a checkout.

Point ``LPH_NEMO_RL_PATH`` at a NeMo-RL source checkout (the directory holding
the ``nemo_rl`` package; its PyPI name holds no code) and run the suite with
``--target harness.targets.nemo_rl.token:NemoRLTarget`` (``nox -s upstream --
nemo_rl=PATH``). Nothing of NeMo-RL is copied here.

What is loaded, and how
-----------------------
``nemo_rl/distributed/model_utils.py`` and the one module it imports at the
top (``nemo_rl/algorithms/logits_sampling_utils.py``), executed from the
checkout with ``nemo_rl``, ``nemo_rl.algorithms`` and ``nemo_rl.distributed``
presented as namespace packages (``harness/targets/upstream/checkout.py``): their
``__init__`` files set up the trainer and are not run. The module takes its
process groups as arguments and imports Megatron only lazily (for functions
not checked here); the single-rank group is the Megatron stand-in's
``SINGLE_RANK`` (``megatron_stand_in``), on which its ``torch.distributed``
calls are the identity. Names are found by feature detection: a revision
without one of the functions below leaves its capability undeclared.

Mapping NeMo-RL's conventions onto the harness's (docs/targets.md)
------------------------------------------------------------------
* token level: ``DistributedLogprob`` (no chunk) / ``ChunkedDistributedLogprob``
  (``chunk_size``) called directly, as NeMo's own wrappers call them, on the
  harness's ``[rows, V_local]`` shard presented as ``B = 1`` (a view), the shard
  bounds ``tp_rank · V_local`` and ``(tp_rank + 1) · V_local``; the harness hands
  each row its own target, so NeMo's target roll in its wrappers is not used;
* entropy: ``ChunkedDistributedEntropy`` (one chunk of all rows when
  ``chunk_size`` is None). NeMo returns ``sum p log p`` (= −H): the adapter
  NEGATES it. The gate is applied as a NeMo caller would: computed under
  ``torch.no_grad()`` when its gradient is not wanted;
* packed: ``from_parallel_logits_to_logprobs_packed_sequences(logits[1, T//CP,
  V_local], tokens[1, T], cu_seqlens_padded, unpacked_seqlen, start, end, tp
  group, cp_group=..., chunk_size=...)`` with unrolled targets (NeMo rolls each
  sequence itself). ``cu_seqlens_padded`` places sequence ``i`` at its start in
  the full stream, padded to ``2·cp·ceil(T_i / 2cp)`` under CP (NeMo's
  load-balanced sharding is then docs/math.md's zigzag layout), to ``T_i`` without;
  the harness's end padding of the stream is no sequence's and is left out of
  the logits passed (a view: those rows get zero gradient). NeMo returns every
  sample's full vector on every CP rank (its ``AllGatherCPTensor``); the
  adapter picks this rank's zigzag view, so the backward's all-reduce over CP
  sums view-disjoint gradients (1×). Packed entropy: NeMo has no packed
  entropy entry point; ``ChunkedDistributedEntropy`` runs on the local rows and
  each sample's response rows are picked (per-token entropy needs no
  neighbour, so this is NeMo's arithmetic on exactly those rows);
* dtypes: NeMo casts to fp32 inside its Functions; outputs are fp32.

Not declared (UNSUPPORTED in the verdict table), and why
---------------------------------------------------------
* ``policy_loss`` (from logits): NeMo's ``ClippedPGLossFn`` (``nemo_rl/algorithms/
  loss/loss_functions.py``) takes already computed next-token log-probs and
  has no entropy term at all (``approx_entropy`` is a metric). It is checked
  at token level instead: ``token_policy_loss`` and its option capabilities,
  where the checkout has the loss package, through
  ``harness.targets.nemo_rl.policy`` (the class loaded alone, never its
  module's imports);
* ``cp_zigzag`` on a CPU device where the revision's ``AllGatherCPTensor``
  backward moves its index with ``.cuda()`` from pinned memory (the HEAD of
  this writing does): that backward cannot run without CUDA, so under
  ``LPH_DEVICE=cpu`` the capability is left out; with ``LPH_DEVICE=cuda`` it is
  declared. ``cp_allgather`` (NeMo has no DSA-style allgather CP), ``bshd``
  (the packed entry point is thd only), ``response_only`` / ``loss_mask_only``
  (NeMo evaluates every row), ``temperature`` (applied by NeMo's sampling
  helpers before these Functions, outside the code under test) and
  ``donation``;
* ``entropy_gate`` is declared: the gate is the caller's ``no_grad`` above.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import warnings
from functools import cached_property
from pathlib import Path

import torch
import torch.distributed as dist

from harness.targets.nemo_rl.policy import INTERFACES, LOSS_FUNCTIONS, UTILS, NemoRLPolicyTarget
from harness.targets.protocol import Target
from harness.targets.upstream import megatron_stand_in, packing
from harness.targets.upstream.checkout import as_sys_modules, namespace_packages, revision

PATH_VARIABLE = "LPH_NEMO_RL_PATH"
MODEL_UTILS = "nemo_rl.distributed.model_utils"
_PACKAGES = ("nemo_rl", "nemo_rl.algorithms", "nemo_rl.distributed")
TOKEN_FUNCTIONS = ("DistributedLogprob", "ChunkedDistributedLogprob")
PACKED_FUNCTION = "from_parallel_logits_to_logprobs_packed_sequences"


def nemo_rl_root(root: str | os.PathLike | None = None) -> Path:
    """The checkout: ``root``, else ``LPH_NEMO_RL_PATH``; it must hold ``nemo_rl/distributed/model_utils.py``."""
    where = root if root is not None else os.environ.get(PATH_VARIABLE)
    if not where:
        raise RuntimeError(f"set {PATH_VARIABLE} to an NVIDIA-NeMo/RL checkout (the directory holding nemo_rl)")
    path = Path(where).expanduser().resolve()
    if not (path / "nemo_rl" / "distributed" / "model_utils.py").is_file():
        raise FileNotFoundError(f"{PATH_VARIABLE}={where}: no nemo_rl/distributed/model_utils.py under {path}")
    return path


_LOADED: dict[Path, dict] = {}


def load_modules(root: Path) -> dict:
    """Execute NeMo-RL's ``model_utils`` from ``root`` (cached per checkout); returns the ``nemo_rl*`` modules."""
    if root not in _LOADED:
        megatron_stand_in.install()
        modules = namespace_packages(root, _PACKAGES)
        with as_sys_modules(modules, "nemo_rl"):
            importlib.import_module(MODEL_UTILS)
        _LOADED[root] = modules
    return _LOADED[root]


def _cuda_only_cp_backward(module) -> bool:
    """Whether the revision's CP all-gather backward moves tensors to CUDA unconditionally."""
    gather = getattr(module, "AllGatherCPTensor", None)
    if gather is None:
        return False
    return ".cuda(" in inspect.getsource(gather.backward)


def _on_cuda() -> bool:
    return os.environ.get("LPH_DEVICE", "cpu").startswith("cuda")


class NemoRLTarget(Target):
    """NeMo-RL's vocab-parallel log-prob/entropy Functions and packed entry point (see the module docstring)."""

    # what a history replay keys revisions by: the module executed and the one it imports at the top (absent
    # before 2026-03, #2053), and the token-level policy loss's files (``harness.targets.nemo_rl.policy``)
    files_under_test = (
        "nemo_rl/distributed/model_utils.py",
        "nemo_rl/algorithms/logits_sampling_utils.py",
        str(LOSS_FUNCTIONS),
        str(INTERFACES),
        str(UTILS),
    )

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = nemo_rl_root(root)
        rev = revision(self.root)
        self.name = f"nemo_rl@{rev}" if rev else "nemo_rl"
        self.modules = load_modules(self.root)
        self.policy, self.policy_error = self._policy()
        self.capabilities = self._capabilities()

    def _policy(self) -> tuple[NemoRLPolicyTarget | None, str | None]:
        """The token-level policy loss, or None and why: a checkout without the loss package (before its split
        into ``nemo_rl/algorithms/loss/``, 2026-03), or one whose ``ClippedPGLossFn`` cannot be loaded alone
        (kept in ``policy_error`` and warned: the log-prob checks of that revision still run)."""
        if not (self.root / LOSS_FUNCTIONS).is_file():
            return None, f"no {LOSS_FUNCTIONS}"
        try:
            return NemoRLPolicyTarget(self.root, self.name), None
        except (LookupError, ImportError, NameError) as exc:
            warnings.warn(f"{self.name}: ClippedPGLossFn not loaded, no token_policy_loss: {exc}", stacklevel=2)
            return None, str(exc)

    @cached_property
    def _module(self):
        return self.modules[MODEL_UTILS]

    def _capabilities(self) -> frozenset:
        """What the revision has: ``token`` with ``DistributedLogprob`` alone (before #918, 2025-08, it has no
        ``ChunkedDistributedLogprob``), ``chunking`` with both, ``packed`` where its packed entry point exists."""
        module, caps = self._module, set()
        if hasattr(module, TOKEN_FUNCTIONS[0]):
            caps.add("token")
            if hasattr(module, TOKEN_FUNCTIONS[1]):
                caps.add("chunking")
            if hasattr(module, "ChunkedDistributedEntropy"):
                caps |= {"entropy", "entropy_gate"}
            if hasattr(module, PACKED_FUNCTION):
                caps.add("packed")
                parameters = inspect.signature(getattr(module, PACKED_FUNCTION)).parameters
                if "chunk_size" not in parameters:
                    caps.discard("chunking")  # one option for both entry points: the packed one has no chunk yet
                if "cp_group" in parameters and (_on_cuda() or not _cuda_only_cp_backward(module)):
                    caps.add("cp_zigzag")
        if self.policy is not None:
            caps |= self.policy.capabilities
        return frozenset(caps)

    def combination_needs(self, options) -> set[str]:
        return self.policy.combination_needs(options) if self.policy is not None else set()

    def token_policy_loss(self, log_probs, **arguments):
        return self.policy.token_policy_loss(log_probs, **arguments)

    @contextlib.contextmanager
    def _calling(self, tp_group, cp_group):
        megatron_stand_in.set_groups(tp_group, cp_group)
        with as_sys_modules(self.modules, "nemo_rl"):
            yield

    def _refuse(self, temperature) -> None:
        if temperature != 1.0:
            raise ValueError(f"{self.name}: temperature={temperature} is applied outside the code under test")

    @staticmethod
    def _shard(logits, tp_group):
        group = megatron_stand_in.SINGLE_RANK if tp_group is None else tp_group
        tp_rank = 0 if tp_group is None else dist.get_rank(tp_group)
        vocab_local = logits.shape[-1]
        return group, tp_rank * vocab_local, (tp_rank + 1) * vocab_local

    def _entropy(self, logits_3d, group, chunk_size, entropy_grad):
        """NeMo's ``sum p log p`` per row, negated into the harness's ``H``; ``[rows]``."""
        chunk = chunk_size if chunk_size is not None else max(int(logits_3d.shape[1]), 1)
        with contextlib.nullcontext() if entropy_grad else torch.no_grad():
            negative = self._module.ChunkedDistributedEntropy.apply(logits_3d, chunk, group, False)
            return -negative.squeeze(0)

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        self._refuse(temperature)
        module = self._module
        group, start, end = self._shard(logits, tp_group)
        batched, batched_targets = logits.unsqueeze(0), targets.unsqueeze(0)
        with self._calling(tp_group, None):
            if chunk_size is None:
                log_probs = module.DistributedLogprob.apply(batched, batched_targets, start, end, group, False)
            else:
                log_probs = module.ChunkedDistributedLogprob.apply(
                    batched, batched_targets, start, end, chunk_size, group, False
                )
            entropy = self._entropy(batched, group, chunk_size, entropy_grad) if with_entropy else None
        return log_probs.squeeze(0), entropy

    def packed_log_probs(
        self,
        logits,
        inputs,
        *,
        tp_group,
        cp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        response_only,
        loss_mask_only,
    ):
        self._refuse(temperature)
        if response_only or loss_mask_only:
            flag = "response_only" if response_only else "loss_mask_only"
            raise ValueError(f"{self.name}: {flag}=True: NeMo-RL evaluates every row (no response_only/loss_mask_only)")
        if inputs.qkv_format != "thd":
            raise ValueError(
                f"{self.name}: qkv_format={inputs.qkv_format!r}: NeMo's packed entry point takes qkv_format='thd' only"
            )
        if inputs.cp_mode not in ("none", "zigzag") or (
            inputs.cp_mode == "zigzag" and "cp_zigzag" not in self.capabilities
        ):
            raise ValueError(f"{self.name}: cp_mode={inputs.cp_mode!r} is not a layout this target runs")
        cp, cp_rank = packing.cp_size_and_rank(cp_group)
        group, start, end = self._shard(logits, tp_group)
        rows = packing.local_sequence_rows(inputs, cp)
        stream = logits[:rows].unsqueeze(0)
        unpacked = packing.unpacked_length(inputs, cp)
        with self._calling(tp_group, cp_group):
            out = getattr(self._module, PACKED_FUNCTION)(
                stream,
                packing.full_stream_tokens(inputs, cp, logits.device),
                packing.cu_seqlens_padded(inputs, cp, logits.device),
                unpacked,
                start,
                end,
                group,
                inference_only=False,
                cp_group=cp_group,
                **({} if chunk_size is None else {"chunk_size": chunk_size}),
            )
            entropy = None
            if with_entropy:
                per_row = self._entropy(stream, group, chunk_size, entropy_grad)
                entropy = packing.per_sample_rows(per_row, inputs, cp, cp_rank)
        return packing.per_sample_view(out, inputs, cp, cp_rank), entropy
