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

Packed batches (where the installed version defines
``from_parallel_logits_to_logprobs_packed_sequences``; 0.3.0 does):

* called as SkyRL's Megatron wrapper calls it: ``logits[1, T // CP, V_local]``,
  the full stream's UNROLLED token ids ``[1, T]`` (SkyRL rolls each sequence
  itself), ``cu_seqlens_padded``, ``unpacked_seqlen``, the shard bounds, the TP
  group, ``cp_group`` and ``chunk_size``. The mapping of thd and zigzag CP onto
  ``cu_seqlens_padded`` (each sequence padded to ``2·cp·ceil(T_i / 2cp)`` under
  CP, its load-balanced chunks ``r`` and ``2cp−1−r`` on rank ``r``: docs/math.md's
  zigzag layout) is ``harness/targets/upstream/packing.py``, shared with NeMo-RL. SkyRL
  requires ``cu_seqlens_padded[-1]`` to cover every row it is given, so the
  harness's end padding is left out of the logits passed (a view; those rows
  get zero gradient). SkyRL returns each sample's full vector on every CP rank
  (``AllGatherPackedCPTensor``); the adapter picks this rank's zigzag view, and
  that Function's backward keeps each rank's own tokens' gradient (1×);
* packed entropy: SkyRL's packed entropy helper returns only a masked mean over
  the batch (what its loss consumes), so per-token entropy is SkyRL's
  ``vocab_parallel_entropy`` over the local rows, each sample's response rows
  picked by the adapter (a row's entropy depends on that row only); gate as at
  token level. Every local row, padding included, goes through it, as in
  SkyRL's own ``vocab_parallel_entropy_packed_sequences``: with a ``-inf``
  logit its ``0·(−inf)`` makes the row's entropy and gradient NaN even where
  the upstream gradient is 0, which the checks report as "padding rows
  received a gradient" (SkyRL's, not this mapping's: the stand-in seam test
  ``test_cp_padding_rows_get_no_gradient_from_the_adapter`` is the control).

Policy loss (``policy_loss``, where the installed version has
``utils/ppo_utils.py`` with ``PolicyLossRegistry`` and a Megatron model wrapper
whose entropy gate can be read; 0.3.0 has both): SkyRL's ``ppo_policy_loss``
with its ``sequence_mean`` reduction (times ``B``: exactly the harness's
``sum_of_sample_mean``) on the log-probs of the packed path above, the entropy
gate and term condition read from the wrapper's ``loss_func``, and the entropy
term built by the adapter (SkyRL's own is a batch-wide token mean, not a
per-sample mean). The whole mapping is ``harness/targets/skyrl/policy.py``;
its import-time dependencies (Ray, loguru, jaxtyping, omegaconf, numpy, the
trainer config) are ``harness/targets/skyrl/stand_ins.py``.

Temperature: SkyRL's Megatron wrapper (``megatron_model_wrapper.py``, 0.2.0
and 0.3.0) divides the model's logits by the temperature (``logits.div_(t)``)
before every one of these functions, and its entropy is computed on the same
divided logits; the adapter makes that same division, out of place (the
harness's logits are the caller's input, not a fresh model output the
wrapper may overwrite). A division is the same rounding in place or not.

Not declared, hence UNSUPPORTED in the verdict table:
``cp_allgather`` (SkyRL has no DSA-style allgather CP), ``bshd`` (its packed
entry point is thd), ``response_only`` / ``loss_mask_only`` (it evaluates every
row) and ``donation``; ``cp_zigzag`` where the installed version has no packed
entry point with ``cp_group``, or where its packed CP gather's backward calls
``.cuda(`` and the harness runs on the CPU; ``policy_loss`` where
``ppo_utils.py`` or the wrapper's gate is missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
from functools import cached_property
from pathlib import Path

import torch
import torch.distributed as dist

from harness.targets.protocol import Target
from harness.targets.skyrl import options as skyrl_options
from harness.targets.skyrl import policy as skyrl_policy
from harness.targets.upstream import megatron_stand_in, packing

MODEL_UTILS = Path("skyrl/backends/skyrl_train/distributed/megatron/model_utils.py")
PATH_VARIABLE = "LPH_SKYRL_PATH"
PACKED_FUNCTION = "from_parallel_logits_to_logprobs_packed_sequences"


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


def _divided(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """What SkyRL's Megatron wrapper does to the logits before its log-prob code: divide by the temperature."""
    return logits if temperature == 1.0 else logits / temperature


class SkyRLTarget(Target):
    """SkyRL's vocab-parallel log-prob and entropy Functions (see the module docstring)."""

    files_under_test = (
        str(MODEL_UTILS),
        "skyrl/backends/skyrl_train/utils/ppo_utils.py",
        "skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py",
    )

    def __init__(self, root: Path | None = None):
        self.root = skyrl_root() if root is None else Path(root)
        self.name = f"skyrl-{_version(self.root)}"
        self.capabilities = self._capabilities()

    def _capabilities(self) -> frozenset:
        """Token level always (``load_model_utils`` insists); packed and CP by feature detection."""
        caps = {"token", "entropy", "entropy_gate", "chunking", "temperature"}
        packed = getattr(self._module, PACKED_FUNCTION, None)
        if packed is not None:
            caps.add("packed")
            # The gather the packed path uses (0.3.0: AllGatherPackedCPTensor, 0.2.0: AllGatherCPTensor) may move its
            # index to CUDA in backward, which a CPU run cannot do (an adapter limitation, not SkyRL's defect).
            used = inspect.getsource(packed)
            helper = getattr(self._module, "allgather_cp_sharded_tensor", None)
            if helper is not None and helper.__name__ in used:
                used += inspect.getsource(helper)
            names = [n for n in ("AllGatherPackedCPTensor", "AllGatherCPTensor") if n in used]
            gathers = [getattr(self._module, n) for n in names if hasattr(self._module, n)]
            cuda_only = any(".cuda(" in inspect.getsource(g.backward) for g in gathers)
            on_cuda = os.environ.get("LPH_DEVICE", "cpu").startswith("cuda")
            if "cp_group" in inspect.signature(packed).parameters and (on_cuda or not cuda_only):
                caps.add("cp_zigzag")
            self._ppo_utils = skyrl_policy.load_ppo_utils(self.root)
            self._gate = skyrl_policy.read_wrapper_gate(self.root)
            if self._ppo_utils is not None and self._gate is not None:
                caps.add("policy_loss")
                caps |= skyrl_options.capabilities(self._ppo_utils)
        return frozenset(caps)

    @cached_property
    def _module(self):
        return load_model_utils(self.root)

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        logits = _divided(logits, temperature)
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

    def _entropy(self, logits, entropy_grad):
        """SkyRL's per-row entropy (already ``-sum p log p``), its gradient gated by the caller's ``no_grad``."""
        with torch._dynamo.config.patch(disable=True), contextlib.nullcontext() if entropy_grad else torch.no_grad():
            return self._module.vocab_parallel_entropy(logits)

    def _check_packed(self, inputs, response_only, loss_mask_only) -> None:
        if response_only or loss_mask_only:
            flag = "response_only" if response_only else "loss_mask_only"
            raise ValueError(f"{self.name}: {flag}=True: SkyRL evaluates every row (no response_only/loss_mask_only)")
        if inputs.qkv_format != "thd":
            raise ValueError(
                f"{self.name}: qkv_format={inputs.qkv_format!r}: SkyRL's packed entry point takes qkv_format='thd' only"
            )
        if inputs.cp_mode != "none" and f"cp_{inputs.cp_mode}" not in self.capabilities:
            raise ValueError(f"{self.name}: cp_mode={inputs.cp_mode!r} is not a layout this target runs")

    def _packed_call(self, logits, inputs, tp_group, cp_group, chunk_size):
        """SkyRL's packed entry point as its Megatron wrapper calls it: ``([B, U − 1], local stream, cp, cp_rank)``."""
        module = self._module
        megatron_stand_in.set_groups(tp_group, cp_group)
        group = megatron_stand_in.SINGLE_RANK if tp_group is None else tp_group
        tp_rank = 0 if tp_group is None else dist.get_rank(tp_group)
        cp, cp_rank = packing.cp_size_and_rank(cp_group)
        vocab_local = logits.shape[-1]
        stream = logits[: packing.local_sequence_rows(inputs, cp)]
        out = getattr(module, PACKED_FUNCTION)(
            stream.unsqueeze(0),
            packing.full_stream_tokens(inputs, cp, logits.device),
            packing.cu_seqlens_padded(inputs, cp, logits.device),
            packing.unpacked_length(inputs, cp),
            tp_rank * vocab_local,
            (tp_rank + 1) * vocab_local,
            group,
            inference_only=False,
            cp_group=cp_group,
            chunk_size=chunk_size,
        )
        return out, stream, cp, cp_rank

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
        self._check_packed(inputs, response_only, loss_mask_only)
        logits = _divided(logits, temperature)
        out, stream, cp, cp_rank = self._packed_call(logits, inputs, tp_group, cp_group, chunk_size)
        entropy = None
        if with_entropy:
            entropy = packing.per_sample_rows(self._entropy(stream, entropy_grad), inputs, cp, cp_rank)
        return packing.per_sample_view(out, inputs, cp, cp_rank), entropy

    def policy_loss(
        self,
        logits,
        inputs,
        *,
        advantages,
        old_log_probs,
        eps_clip,
        eps_clip_high,
        entropy_coef,
        with_entropy,
        tp_group,
        cp_group,
        chunk_size,
        temperature,
        response_only,
        loss_mask_only,
        options=None,
    ):
        """SkyRL's policy loss on its packed log-probs, entropy gated as its wrapper does (policy.py, options.py)."""
        if "policy_loss" not in self.capabilities:
            raise ValueError(f"{self.name}: no policy loss in this version (see the module docstring)")
        self._check_packed(inputs, response_only, loss_mask_only)
        logits = _divided(logits, temperature)
        settings = skyrl_policy.algorithm_settings(
            eps_clip=eps_clip,
            eps_clip_high=eps_clip_high,
            entropy_coef=entropy_coef,
            with_entropy=with_entropy,
            options=options,
        )
        out, stream, cp, cp_rank = self._packed_call(logits, inputs, tp_group, cp_group, chunk_size)
        entropy_rows = None
        if with_entropy:
            with torch._dynamo.config.patch(disable=True), skyrl_policy.grad_context(self._gate, settings):
                entropy_rows = self._module.vocab_parallel_entropy(stream)
        loss, entropy = skyrl_policy.policy_loss(
            self._ppo_utils,
            self._gate,
            out,
            entropy_rows,
            inputs,
            advantages=advantages,
            old_log_probs=old_log_probs,
            settings=settings,
            cp=cp,
            cp_rank=cp_rank,
            options=options,
            cp_group=cp_group,
        )
        return loss, packing.per_sample_view(out, inputs, cp, cp_rank), entropy
