"""Target adapter for verl's Megatron log-prob and entropy path (verl-project/verl).

What is checked: ``vocab_parallel_entropy``, ``vocab_parallel_entropy_with_chunking``
and ``vocab_parallel_log_probs_from_logits`` of ``verl/utils/megatron/tensor_parallel.py``,
executed from the tree ``harness/targets/verl/source.py`` finds (``LPH_VERL_PATH``
or the installed ``verl``), composed as verl's Megatron engine composes them in
``MegatronEngineWithLMHead._lm_head_logits_processor``
(``verl/workers/engine/megatron/transformer_impl.py``; that module imports
Megatron proper and the trainer, so its few lines are repeated here):

1. the logits are divided by the temperature, cast to the logits' dtype first
   (``logits.div_(temperature.to(logits.dtype))``: a bf16 run divides by the
   bf16-rounded temperature, as verl does; a non-positive one is 1e-8 first). verl divides in place the model
   output it owns; the harness's logits are the caller's input, so the
   adapter divides out of place (the same rounding) into a tensor of its own;
2. with entropy: the divided logits are backed up (``clone``) for the
   log-probs, and the entropy is computed on the divided logits themselves,
   by ``vocab_parallel_entropy`` or, with a chunk size,
   ``vocab_parallel_entropy_with_chunking(logits[1, rows, V_local], chunk)``
   (verl's ``entropy_from_logits_chunk_size``; its engine hands ``[1, T, V]``);
   its backward writes that tensor and restores it, which is why verl backs it up;
3. log-probs: ``vocab_parallel_log_probs_from_logits(backup, labels)`` =
   minus Megatron's ``vocab_parallel_cross_entropy`` (stood in,
   ``harness/targets/upstream/megatron_cross_entropy.py``: Megatron's values
   and its overwrite of an fp32 input; a defect of Megatron's own backward is
   out of reach here). The harness gives each row its target, which is what
   verl's rolled labels are.

Mapping onto the harness's conventions (docs/targets.md): logits ``[rows,
V_local]`` are this rank's shard, as verl's; the TP group comes from the mpu
stand-in; entropy ``-Σ p log p`` (verl's sign). verl chunks the ENTROPY only
(the log-prob path is one Megatron call), so ``chunk_size`` maps onto the
entropy's chunk. verl computes the entropy only when its caller asks
(``calculate_entropy``) and, for metrics, under the caller's ``no_grad``; the
adapter computes it under ``torch.no_grad()`` when its gradient is not wanted.

The policy loss, from logits (``policy_loss``) and from ``[B, R]`` log-prob
matrices (``token_policy_loss``), with the options verl has, is
``harness/targets/verl/policy.py``.

Packed level (``packed``, ``cp_zigzag``, ``cp_allgather``; declared where the
tree has ``verl/models/mcore/util.py`` with ``preprocess_thd_engine`` /
``postprocess_thd_engine``, ``cp_allgather`` where that takes ``cp_layout``):
``harness/targets/verl/packed.py`` runs verl's own thd packing (each sequence
padded to a multiple of ``tp·cp·2``), CP split, label roll and CP gather around
the logits processor above, the temperature per row as verl's engine expands
it; the harness's rows are re-laid out into verl's across the CP ranks
(``packed.py`` says how, and how the gradient comes back). Under CP the policy
loss reads verl's loss over the gathered batch (every rank holds the whole
batch's advantages and log-probs, the adapter gathers the harness's views)
as each rank's share: the value divided by ``cp``, the gradient verl's.

Not declared (UNSUPPORTED), and why: ``bshd`` (the engine's bshd path,
``preprocess_bshd_engine``, is not mapped); ``entropy_gate`` (the gate is the
caller's ``no_grad``, i.e. the adapter's, not verl's); ``response_only`` /
``loss_mask_only`` (every row is evaluated); ``donation``. Mismatched CP
slices (ranks handing different row counts) are refused by the adapter's
gather: verl's engine makes its rows itself, so it has no such input.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import torch

from harness.targets.protocol import Target
from harness.targets.upstream import megatron_stand_in, packing
from harness.targets.verl import packed as verl_packed
from harness.targets.verl import policy as verl_policy
from harness.targets.verl import source


def divided(logits: torch.Tensor, temperature) -> torch.Tensor:
    """verl's ``logits.div_(temperature.unsqueeze(-1).to(logits.dtype))``, out of place (a tensor the adapter owns).

    ``temperature`` is a float or one per row (verl's engine expands it per
    token). As verl's logits processor, a non-positive temperature becomes 1e-8
    first ("avoid non-positive temperature such as padding"), so it is never refused.
    """
    temperature = torch.as_tensor(temperature, dtype=torch.float32, device=logits.device)
    temperature = torch.where(temperature <= 0, torch.tensor(1e-8, device=logits.device), temperature)
    return logits / temperature.unsqueeze(-1).to(logits.dtype)


def logits_processor(tp, scores, labels, *, chunk_size, with_entropy, entropy_grad):
    """verl's ``_lm_head_logits_processor`` after the temperature: ``(log_probs [..], entropy [..] or None)``.

    ``scores`` is ``[1, T, V_local]`` (as the engine hands it), owned by the caller
    of this function (verl's entropy backward writes it).
    """
    entropy = None
    if with_entropy:
        backup = scores.clone()
        with contextlib.nullcontext() if entropy_grad else torch.no_grad():
            if chunk_size is not None:
                entropy = tp.vocab_parallel_entropy_with_chunking(scores, chunk_size=chunk_size)
            else:
                entropy = tp.vocab_parallel_entropy(scores)
    else:
        backup = scores
    return tp.vocab_parallel_log_probs_from_logits(backup, labels), entropy


class VerlTarget(Target):
    """verl's Megatron log-prob/entropy functions and PPO loss (see the module docstring)."""

    files_under_test = source.FILES_UNDER_TEST  # what a history replay keys revisions by

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = source.verl_root(root)
        self.name = source.version(self.root)
        self.tp = source.tensor_parallel(self.root)
        self.algos = source.core_algos(self.root)
        self.util = source.mcore_util(self.root)
        caps = {"token", "entropy", "temperature"}
        if hasattr(self.tp, "vocab_parallel_entropy_with_chunking"):
            caps.add("chunking")
        self.rollout_weights = None
        if self.util is not None:
            caps |= {"packed", "cp_zigzag"}
            if verl_packed.has_layout_argument(self.util):
                caps.add("cp_allgather")
        if self.algos is not None and verl_policy.supported(self.algos):
            self.rollout_weights = verl_policy.rollout_weights_function(self.root, self.algos)
            caps |= {"policy_loss", "token_policy_loss", "token_policy_entropy"} | verl_policy.capabilities(
                self.algos, self.rollout_weights
            )
        self.capabilities = frozenset(caps)

    def _chunk(self, chunk_size):
        """The entropy's chunk: the harness's ``chunk_size`` as given (0 and negatives reach verl), None: unchunked."""
        return chunk_size if chunk_size is not None and "chunking" in self.capabilities else None

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        megatron_stand_in.set_groups(tp_group, None)
        with torch._dynamo.config.patch(disable=True):
            log_probs, entropy = logits_processor(
                self.tp,
                divided(logits, temperature).unsqueeze(0),
                targets.unsqueeze(0),
                chunk_size=self._chunk(chunk_size),
                with_entropy=with_entropy,
                entropy_grad=entropy_grad,
            )
        return log_probs[0], (entropy[0] if entropy is not None else None)

    def _processor(self, chunk_size, with_entropy, entropy_grad):
        """verl's logits processor on the packed stream, the temperature per row (``packed.py``'s ``process``)."""

        def process(scores, labels, per_row_temperature):
            return logits_processor(
                self.tp,
                divided(scores, per_row_temperature),
                labels,
                chunk_size=self._chunk(chunk_size),
                with_entropy=with_entropy,
                entropy_grad=entropy_grad,
            )

        return process

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
        """verl's engine on a packed batch: its thd packing, CP split and gather around the processor (packed.py)."""
        if "packed" not in self.capabilities:
            raise ValueError(f"{self.name}: no {source.MCORE_UTIL} with the thd helpers in this tree")
        if inputs.qkv_format != "thd":
            raise ValueError(f"{self.name}: qkv_format={inputs.qkv_format!r}: only qkv_format='thd' is mapped for verl")
        if inputs.cp_mode not in verl_packed.VERL_LAYOUTS or (
            inputs.cp_mode != "none" and f"cp_{inputs.cp_mode}" not in self.capabilities
        ):
            raise ValueError(f"{self.name}: cp_mode={inputs.cp_mode!r} is not a layout this target runs")
        if (packing.cp_size_and_rank(cp_group)[0] > 1) != (inputs.cp_mode != "none"):
            raise ValueError(f"{self.name}: cp_mode={inputs.cp_mode!r} does not match the cp_group given")
        if response_only or loss_mask_only:
            raise ValueError(f"{self.name}: response_only/loss_mask_only: verl evaluates every row")

        with torch._dynamo.config.patch(disable=True):
            return verl_packed.packed_outputs(
                self.util,
                self._processor(chunk_size, with_entropy, entropy_grad),
                logits,
                inputs,
                tp_group=tp_group,
                cp_group=cp_group,
                temperature=temperature,
                with_entropy=with_entropy,
            )

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
        cp, cp_rank = packing.cp_size_and_rank(cp_group)
        if (cp > 1 or inputs.cp_mode != "none") and f"cp_{inputs.cp_mode}" not in self.capabilities:
            raise ValueError(f"{self.name}: cp_mode={inputs.cp_mode!r} is not a layout this target runs")
        if (cp > 1) != (inputs.cp_mode != "none"):
            raise ValueError(f"{self.name}: cp_mode={inputs.cp_mode!r} does not match the cp_group given")
        if inputs.qkv_format != "thd":
            raise ValueError(f"{self.name}: qkv_format={inputs.qkv_format!r}: only thd is mapped for verl")
        if response_only or loss_mask_only:
            raise ValueError(f"{self.name}: response_only/loss_mask_only: verl evaluates every row")
        if cp > 1:
            # verl's loss under CP: every rank holds the whole batch (gathered outputs, its own rows' gradient)
            with torch._dynamo.config.patch(disable=True):
                per_sample, per_sample_entropy = verl_packed.whole_responses(
                    self.util,
                    self._processor(chunk_size, with_entropy, True),
                    logits,
                    inputs,
                    tp_group=tp_group,
                    cp_group=cp_group,
                    temperature=temperature,
                )
            advantages = verl_packed.whole_from_views(advantages, inputs, cp_group, "advantages")
            old_log_probs = verl_packed.whole_from_views(old_log_probs, inputs, cp_group, "old_log_probs")
            options = _whole_options(options, inputs, cp_group)
        else:
            megatron_stand_in.set_groups(tp_group, None)
            labels = verl_policy.rolled_labels(inputs, logits.shape[0], logits.device)
            with torch._dynamo.config.patch(disable=True):
                log_probs, entropy = logits_processor(
                    self.tp,
                    divided(logits, temperature).unsqueeze(0),
                    labels.unsqueeze(0),
                    chunk_size=self._chunk(chunk_size),
                    with_entropy=with_entropy,
                    entropy_grad=True,
                )
            per_sample = verl_policy.response_rows(log_probs[0], inputs)
            per_sample_entropy = verl_policy.response_rows(entropy[0], inputs) if with_entropy else None
        loss = verl_policy.ppo_loss(
            self.algos,
            self.rollout_weights,
            per_sample,
            per_sample_entropy,
            inputs,
            advantages=advantages,
            old_log_probs=old_log_probs,
            eps_clip=eps_clip,
            eps_clip_high=eps_clip_high,
            entropy_coef=entropy_coef,
            options=options,
        )
        if cp > 1:
            # Each rank's loss is the whole batch's; its share (the harness's convention) keeps that gradient.
            loss = loss - loss.detach() * (1 - 1 / cp)
            per_sample = verl_packed.view_of_whole(per_sample, inputs, cp, cp_rank)
            if per_sample_entropy is not None:
                per_sample_entropy = verl_packed.view_of_whole(per_sample_entropy, inputs, cp, cp_rank)
        return loss, per_sample, per_sample_entropy

    def token_policy_loss(
        self,
        log_probs,
        *,
        old_log_probs,
        advantages,
        loss_mask,
        eps_clip,
        eps_clip_high,
        entropy,
        entropy_coef,
        options=None,
    ):
        """verl's ``ppo_loss`` composition on the harness's ``[B, R]`` matrices (``verl_policy.matrix_loss``)."""
        return verl_policy.matrix_loss(
            self.algos,
            self.rollout_weights,
            log_probs,
            entropy,
            loss_mask,
            old=old_log_probs,
            adv=advantages,
            eps_clip=eps_clip,
            eps_clip_high=eps_clip_high,
            entropy_coef=entropy_coef,
            options=options,
        )


def _whole_options(options, inputs, cp_group):
    """The options' per-sample tensors (views like the advantages under CP) made whole, as verl's loss reads them."""
    if options is None:
        return None
    changes = {
        name: verl_packed.whole_from_views(getattr(options, name), inputs, cp_group, name)
        for name in ("ref_log_probs", "rollout_log_probs")
        if getattr(options, name) is not None
    }
    return dataclasses.replace(options, **changes) if changes else options
