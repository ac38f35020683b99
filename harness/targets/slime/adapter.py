"""Target adapter for THUDM/slime's Megatron log-prob, entropy and policy-loss code, loaded from a checkout.

Point ``LPH_SLIME_PATH`` at a slime source checkout (any revision: the root
that holds the ``slime`` package) and run the suite with
``--target harness.targets.slime.adapter:SlimeTarget``. Rank processes inherit the
variable and load the same checkout. Nothing of slime is copied here.

What is loaded, and how
-----------------------
Three modules, executed from the checkout's files at run time:
``slime.utils.ppo_utils`` (the token-level functions and ``compute_policy_loss``),
``slime.backends.megatron_utils.loss`` (``get_log_probs_and_entropy``,
``policy_loss_function``) and ``...megatron_utils.cp_utils``
(``get_sum_of_sample_mean``). Their parent packages are presented as plain
namespace packages: their ``__init__`` files (which pull in DeepEP, Megatron
Bridge and the Megatron patches of the trainer) are not executed. The loaded
modules live under their own names only while the adapter loads or calls them
(``sys.modules`` is swapped back afterwards), so several checkouts can be
loaded in one process.

Their imports are answered by stand-ins: ``megatron.core.mpu`` /
``parallel_state`` by ``megatron_stand_in`` (the job's TP/CP groups, set per
call), ``megatron.core.fusions.fused_cross_entropy`` (older revisions'
``compute_log_probs``) and the import-only ``ray`` / ``httpx`` by
``harness.targets.slime.stand_ins``. The Megatron fused cross-entropy is therefore the
stand-in's (written from Megatron's documented behaviour, including the
in-place overwrite of its input), not Megatron's own kernel; everything else
that runs is slime's code. ``torch.compile`` decorations in slime run eagerly
(dynamo disabled for the call), which changes no value.

API differences are found by FEATURE DETECTION, never by commit hash: which
functions the modules define, their signatures, and which ``args.*`` settings
``get_log_probs_and_entropy`` / ``get_responses`` read (their source text).

Mapping onto the harness's conventions (docs/targets.md)
--------------------------------------------------------
* token level: ``calculate_log_probs_and_entropy(logits, targets, tp_group, ...)``
  where the revision defines it: its ``tokens`` are one target id per logits
  row (its callers pass the shifted tokens), which is the harness's
  convention, so targets pass through; ``chunk_size`` (None → slime's -1) and
  the entropy-gradient flag (``with_entropy_grad`` / ``need_entropy_grad``)
  only where the signature has them. Revisions without it (e.g. 0d3ada3a7)
  split the work into ``compute_log_probs`` and ``compute_entropy_from_logits``:
  the adapter composes them as their caller did (clone, empty rows → empty
  outputs) and, for ``entropy_grad=False``, computes the entropy under
  ``torch.no_grad()`` (the caller's gate, the right way round: the packed
  path checks slime's own gate). Log-probs ``[rows, 1]`` are squeezed.
* packed and policy level: ``get_log_probs_and_entropy(logits[1, T, V_local],
  args=..., unconcat_tokens=per-sample full token ids, total_lengths,
  response_lengths, with_entropy)``. slime finds each sample's response rows
  itself (``get_responses`` / ``_build_shifted_tokens``), on exactly the
  harness's layouts: thd (end padding ignored), zigzag CP (``2·cp`` chunks of
  ``ceil(T_i/2cp)`` per sample, rank ``r`` holding ``r`` and ``2cp−1−r``), allgather
  CP (contiguous pieces of the end-padded stream, results redistributed to the
  zigzag view), and, on revisions with ``args.qkv_format`` and ``max_seq_lens``,
  bshd (logits ``[B, S, V_local]``, ``max_seq_lens = [S] * B``). Its
  per-sample outputs are already the harness's (zigzag view under CP).
* ``args`` is a Namespace with ``rollout_temperature`` (the temperature),
  ``log_probs_chunk_size`` (-1 for none), ``allgather_cp``, ``qkv_format``,
  ``entropy_coef`` and the policy-loss settings (PPO clip ``eps_clip`` /
  ``eps_clip_high``, no dual clip, GRPO-style per-token KL, no TIS, OPSM, KL
  loss or rollout log-probs, per-sample-mean reduction).
* the entropy gate: slime derives it from ``args.entropy_coef`` inside
  ``get_log_probs_and_entropy``. ``packed_log_probs(entropy_grad=b)`` sets
  ``entropy_coef`` to 1.0 when ``with_entropy and b`` and to 0 otherwise (what
  a slime caller that wants or does not want the entropy gradient sets);
  ``policy_loss`` passes the harness's ``entropy_coef`` itself, so the gate
  checked (docs/bugs.md #1) is slime's.
* ``policy_loss`` runs slime's own ``policy_loss_function(args, batch, logits,
  sum_of_sample_mean)`` with ``sum_of_sample_mean`` from slime's
  ``get_sum_of_sample_mean`` (per-sample masked mean, summed; under CP each
  rank's share divided by the whole sample's mask count, so the CP ranks'
  losses add up to the batch's, the harness's convention). The batch holds
  the advantages and old log-probs (this CP rank's zigzag view, as slime's
  are) and the full per-sample loss masks. The per-sample log-probs and
  entropy returned are the ones slime's loss was built from (recorded from
  its call of ``get_log_probs_and_entropy``). With ``with_entropy=False``
  ``entropy_coef`` is 0 (slime always computes the entropy on this path; a
  zero coefficient is how it leaves the loss) and no entropy is returned.
  Megatron's loss scaling in slime's ``loss_function`` (micro-batches, global
  batch size, data-parallel size) is not applied: it is trainer bookkeeping.
* dtypes: slime's packed path asserts fp32 logits (its trainer casts the
  model output), so bf16/fp16 logits are cast with a differentiable
  ``.float()`` before the call, on every path.

Not declared (UNSUPPORTED in the verdict table), and why
--------------------------------------------------------
* ``response_only`` / ``loss_mask_only``: no revision's
  ``get_log_probs_and_entropy`` drops rows before the softmax;
* ``donation``: slime never writes the gradient over the logits;
* ``chunking``: declared only where both ``calculate_log_probs_and_entropy``
  takes ``chunk_size`` and the packed path reads ``args.log_probs_chunk_size``
  (elsewhere a ``chunk_size`` is run as one chunk: chunking changes no value);
* ``entropy_gate``: only where ``get_log_probs_and_entropy`` reads
  ``entropy_coef`` AND the token level has a gate (a gate parameter, or the
  split functions); e.g. f57d56f23 computes every entropy with its graph;
* ``bshd``: only on revisions with ``args.qkv_format`` and ``max_seq_lens``
  (added by slime #1285, removed by #2100);
* ``cp_allgather``: only where the packed path reads ``args.allgather_cp``;
* ``temperature``: where the packed path reads ``args.rollout_temperature``
  (every revision so far); at token level the adapter divides the logits by
  the temperature first, as slime's only caller of the token function does.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from pathlib import Path

import torch

from harness.targets.protocol import Target
from harness.targets.slime import options as slime_options
from harness.targets.slime import stand_ins
from harness.targets.slime.api import (
    LAYOUTS,
    PACKED_GATE_PARAMETER,
    SlimeAPI,
    _as_sys_modules,
    _parameters,
    layout_of,
    load_modules,
)
from harness.targets.upstream import megatron_stand_in
from harness.targets.upstream.checkout import revision

PATH_VARIABLE = "LPH_SLIME_PATH"


MILES_PATH_VARIABLE = "LPH_MILES_PATH"


def slime_root(root: str | os.PathLike | None = None, variable: str = PATH_VARIABLE) -> Path:
    """The checkout: ``root`` if given, else ``$variable``; it must hold one layout's token module (api.LAYOUTS).

    That is ``slime/utils/ppo_utils.py`` (THUDM/slime) or
    ``miles/backends/training_utils/loss_hub/math_utils.py`` (radixark/miles).
    """
    where = root if root is not None else os.environ.get(variable)
    if not where:
        raise RuntimeError(
            f"set {variable} to a THUDM/slime or radixark/miles checkout (the directory holding the slime or miles "
            "package)"
        )
    path = Path(where).expanduser().resolve()
    if layout_of(path) is None:
        raise FileNotFoundError(
            f"{variable}={where}: neither slime/utils/ppo_utils.py nor "
            f"miles/backends/training_utils/loss_hub/math_utils.py under {path}"
        )
    return path


# ---- the adapter ----------------------------------------------------------------------------


def _args(**settings) -> stand_ins.SlimeArgs:
    """The ``args`` slime's loss code reads: a plain GRPO/PPO policy loss with the job's settings."""
    defaults = dict(
        rollout_temperature=1.0,
        log_probs_chunk_size=-1,
        allgather_cp=False,
        qkv_format="thd",
        entropy_coef=0.0,
        eps_clip=0.2,
        eps_clip_high=0.2,
        eps_clip_c=None,
        advantage_estimator="grpo",
        use_rollout_logprobs=False,
        use_opsm=False,
        use_tis=False,
        enable_off_policy_correction=False,  # read by the revisions between #179 and #234 (2025-08)
        get_mismatch_metrics=False,
        custom_tis_function_path=None,
        custom_pg_loss_reducer_function_path=None,
        use_kl_loss=False,
        use_unbiased_kl=False,
        kl_loss_coef=0.0,
        kl_loss_type="low_var_kl",
        calculate_per_token_loss=False,
        rollout_top_p=1.0,
        recompute_loss_function=False,
        use_dynamic_batch_size=False,  # read by the first revisions' policy_loss_func
        # miles' settings (absent from slime, which never reads them)
        true_on_policy_mode=False,
        observe_training_entropy=False,
        skip_actor_forward_only=False,
    )
    return stand_ins.SlimeArgs(**{**defaults, **settings})


def _fp32(logits: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 logits as fp32 (differentiably), as slime's trainer hands them over; other dtypes untouched.

    Only floating dtypes are cast: integer logits reach slime as they are, so
    what slime does with them is what the checks see.
    """
    if logits.is_floating_point() and logits.dtype != torch.float32:
        return logits.float()
    return logits


def _accepted(names: set, **kwargs) -> dict:
    """The keyword arguments among ``kwargs`` that a signature with ``names`` accepts."""
    return {key: value for key, value in kwargs.items() if key in names}


class SlimeTarget(Target):
    """slime's log-prob/entropy and policy-loss code from ``LPH_SLIME_PATH`` (see the module docstring)."""

    path_variable = PATH_VARIABLE
    files_under_test = LAYOUTS[0].files()  # what a history replay keys revisions by

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = slime_root(root, self.path_variable)
        layout = layout_of(self.root)
        rev = revision(self.root)
        self.name = f"{layout.package}@{rev}" if rev else layout.package
        self.api = SlimeAPI.detect(load_modules(self.root, layout), layout)
        self.capabilities = self.api.capabilities()
        if "policy_loss" in self.capabilities:
            self.capabilities = self.capabilities | slime_options.capabilities(self.api)

    @contextlib.contextmanager
    def _calling(self, tp_group, cp_group):
        """The checkout's modules in place, the job's groups in the mpu stand-in (and miles' parallel state),
        ``torch.compile`` run eagerly."""
        megatron_stand_in.set_groups(tp_group, cp_group)
        layout = self.api.layout
        with _as_sys_modules(self.api.modules, layout.package), torch._dynamo.config.patch(disable=True):
            if layout.parallel is not None:
                sys.modules[layout.parallel].set_parallel_state(stand_ins.parallel_state(tp_group, cp_group))
            yield

    def _chunk(self, chunk_size: int | None) -> int:
        """slime's chunk setting: -1 (one chunk) for None, and where the revision cannot chunk.

        Chunking is a working-set strategy that changes no value, so a revision
        without it computes the same answer in one chunk; the checks of
        chunking itself require the capability and are reported UNSUPPORTED.
        """
        return chunk_size if chunk_size is not None and "chunking" in self.capabilities else -1

    def _need(self, capability: str, why: str) -> None:
        if capability not in self.capabilities:
            raise ValueError(f"{self.name}: {why} ({capability!r} is not supported by this revision)")

    # ---- token level ------------------------------------------------------------------

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        if temperature != 1.0:
            self._need("temperature", f"temperature={temperature}")
        api = self.api
        with self._calling(tp_group, None):
            group = sys.modules["megatron.core.parallel_state"].get_tensor_model_parallel_group()
            scores = _fp32(logits)
            if temperature != 1.0:
                scores = scores / temperature
            if api.token_fn is not None:
                options = _accepted(
                    api.token_parameters,
                    chunk_size=self._chunk(chunk_size),
                    **({api.token_gate_parameter: entropy_grad} if api.token_gate_parameter else {}),
                )
                log_probs, entropy = api.token_fn(scores, targets, group, with_entropy=with_entropy, **options)
            else:
                log_probs, entropy = self._split_token_level(scores, targets, group, with_entropy, entropy_grad)
        return log_probs.squeeze(-1), (entropy if with_entropy else None)

    def _split_token_level(self, scores, targets, group, with_entropy, entropy_grad):
        """Older revisions: ``compute_log_probs`` and ``compute_entropy_from_logits`` composed as their caller did."""
        compute_log_probs, compute_entropy = self.api.split_fns
        scores = scores.contiguous()
        if scores.size(0) == 0:
            empty = scores.new_zeros((0,))
            return empty, empty if with_entropy else None
        log_probs = compute_log_probs(scores.clone(), targets, group)
        entropy = None
        if with_entropy:
            with contextlib.nullcontext() if entropy_grad else torch.no_grad():
                entropy = compute_entropy(scores.clone(), group)
        return log_probs, entropy

    # ---- packed level -----------------------------------------------------------------

    def _check_packed(self, inputs, temperature, response_only, loss_mask_only) -> None:
        if response_only or loss_mask_only:
            flag = "response_only" if response_only else "loss_mask_only"
            self._need(flag, f"{flag}=True (slime evaluates every row)")
        if inputs.qkv_format != "thd":
            if inputs.qkv_format != "bshd":
                raise ValueError(f"{self.name}: qkv_format={inputs.qkv_format!r} has no slime equivalent (thd or bshd)")
            if "bshd" not in self.capabilities:
                raise ValueError(
                    f"{self.name}: qkv_format='bshd' is not a layout of this revision (it has qkv_format='thd')"
                )
        if inputs.cp_mode != "none":
            if f"cp_{inputs.cp_mode}" not in self.capabilities:
                raise ValueError(
                    f"{self.name}: cp_mode={inputs.cp_mode!r} is not a context-parallel layout this revision has "
                    f"(it has: {sorted(c[3:] for c in self.capabilities if c.startswith('cp_')) or 'none'})"
                )
        if temperature != 1.0:
            self._need("temperature", f"temperature={temperature}")

    def _layout(self, logits, inputs, **settings):
        """slime's logits tensor, ``args`` and layout keywords for this batch."""
        args = _args(
            allgather_cp=inputs.cp_mode == "allgather",
            qkv_format=inputs.qkv_format,
            **settings,
        )
        scores = _fp32(logits)
        extra = {}
        if inputs.qkv_format == "bshd":
            batch = len(inputs.total_lengths)
            seq_len = scores.shape[0] // batch if batch else 0
            scores = scores.view(batch, seq_len, scores.shape[-1])
            extra["max_seq_lens"] = [seq_len] * batch
        else:
            scores = scores.unsqueeze(0)
        return scores, args, extra

    def _packed_call(self, scores, args, inputs, with_entropy, extra) -> dict:
        out = self.api.packed_fn(
            scores,
            args=args,
            unconcat_tokens=list(inputs.tokens),
            total_lengths=list(inputs.total_lengths),
            response_lengths=list(inputs.response_lengths),
            with_entropy=with_entropy,
            **_accepted(self.api.packed_parameters, **extra),
        )
        return out[-1] if isinstance(out, tuple) else out

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
        self._check_packed(inputs, temperature, response_only, loss_mask_only)
        scores, args, extra = self._layout(
            logits,
            inputs,
            rollout_temperature=temperature,
            log_probs_chunk_size=self._chunk(chunk_size),
            entropy_coef=1.0 if with_entropy and entropy_grad else 0.0,
        )
        if PACKED_GATE_PARAMETER in self.api.packed_parameters:
            extra[PACKED_GATE_PARAMETER] = bool(with_entropy and entropy_grad)
        with self._calling(tp_group, cp_group):
            result = self._packed_call(scores, args, inputs, with_entropy, extra)
        entropy = result.get("entropy") if with_entropy else None
        return list(result["log_probs"]), (list(entropy) if entropy is not None else None)

    # ---- policy loss ------------------------------------------------------------------

    def _sum_of_sample_mean(self, inputs, masks, extra, per_token=False):
        fn = self.api.sum_of_sample_mean_fn
        parameters = _parameters(fn)
        keywords = _accepted(parameters, qkv_format=inputs.qkv_format, **extra)
        if per_token:
            keywords["calculate_per_token_loss"] = True
        return fn(list(inputs.total_lengths), list(inputs.response_lengths), masks, **keywords)

    def _legacy_policy_loss(self, args, batch, scores):
        """The first revisions' ``policy_loss_func``: it returns ``loss / cp_size`` (Megatron multiplies back by the
        CP size when it reduces gradients), so the CP rank's own share is that times the CP size."""
        loss, _normaliser, _metrics = self.api.legacy_policy_fn(args, batch, 1, scores)
        return loss * sys.modules["megatron.core.parallel_state"].get_context_parallel_world_size()

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
        self._need("policy_loss", "the policy loss")
        self._check_packed(inputs, temperature, response_only, loss_mask_only)
        scores, args, extra = self._layout(
            logits,
            inputs,
            rollout_temperature=temperature,
            log_probs_chunk_size=self._chunk(chunk_size),
            entropy_coef=float(entropy_coef) if with_entropy else 0.0,
            observe_training_entropy=bool(with_entropy),
            eps_clip=eps_clip,
            eps_clip_high=eps_clip if eps_clip_high is None else eps_clip_high,
            **slime_options.settings(options),
        )
        masks = [mask.float() for mask in inputs.loss_masks]
        batch = {
            "advantages": list(advantages),
            "log_probs": list(old_log_probs),
            "unconcat_tokens": list(inputs.tokens),
            "total_lengths": list(inputs.total_lengths),
            "response_lengths": list(inputs.response_lengths),
            "loss_masks": masks,
            **slime_options.batch_entries(options, masks),
            **extra,
        }
        # The policy module's own name for the packed entry point (miles imports it from another module).
        loss_module = self.api.modules[self.api.layout.policy]
        original = loss_module.get_log_probs_and_entropy
        recorded = {}

        @functools.wraps(original)
        def recording(*call_args, **call_kwargs):
            out = original(*call_args, **call_kwargs)
            recorded["result"] = out[-1] if isinstance(out, tuple) else out
            return out

        with self._calling(tp_group, cp_group):
            per_token = options is not None and options.aggregation == "token-sum"
            loss_module.get_log_probs_and_entropy = recording
            try:
                if self.api.policy_fn is not None:
                    sum_of_sample_mean = self._sum_of_sample_mean(inputs, masks, extra, per_token)
                    loss, _metrics = self.api.policy_fn(args, batch, scores, sum_of_sample_mean)
                else:
                    loss = self._legacy_policy_loss(args, batch, scores)
            finally:
                loss_module.get_log_probs_and_entropy = original
        result = recorded["result"]
        entropy = list(result["entropy"]) if with_entropy else None
        return loss, list(result["log_probs"]), entropy


class MilesTarget(SlimeTarget):
    """The same adapter on a radixark/miles checkout named by ``LPH_MILES_PATH`` (api.LAYOUTS: the miles layout)."""

    path_variable = MILES_PATH_VARIABLE
    files_under_test = LAYOUTS[1].files()
