"""The default target: this project's own ``impl/``, on its torch backend (``impl-triton``: impl_triton.py)."""

from __future__ import annotations

from dataclasses import fields

from harness.targets.protocol import CAPABILITIES, PackedInputs, Target
from impl.backend import TORCH, use_backend
from impl.batch import PackedBatch
from impl.hidden_states import hidden_log_probs_and_entropy
from impl.packed import log_probs_and_entropy as packed_log_probs_and_entropy
from impl.policy_loss import policy_loss
from impl.policy_terms import LossTerms
from impl.sampling_packed import kept_set_log_probs, packed_sampling_log_probs_and_entropy
from impl.token_level import log_probs_and_entropy as token_log_probs_and_entropy
from impl.token_policy_loss import token_policy_loss


def _batch(inputs: PackedInputs) -> PackedBatch:
    return PackedBatch(
        tokens=inputs.tokens,
        total_lengths=inputs.total_lengths,
        response_lengths=inputs.response_lengths,
        qkv_format=inputs.qkv_format,
        loss_masks=inputs.loss_masks,
    )


class ImplTarget(Target):
    """Adapter for ``impl/``: it supports every capability the suite knows.

    ``backend`` is the token-level backend every call runs on
    (``impl.backend.use_backend``): ``torch`` here, on every device, so the
    ``impl`` target keeps checking the torch code even on a GPU, where
    ``impl``'s own default would pick the Triton kernels.
    """

    name = "impl"
    capabilities = CAPABILITIES
    backend = TORCH
    # impl reads no tensor value but in its validation, which data-less tensors skip (impl.validation.is_fake):
    # its real-scale memory traces run on meta tensors (harness.memory.tracker.traces_on_meta).
    traces_on_meta = True

    def token_log_probs(
        self,
        logits,
        targets,
        *,
        tp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        donate_logits=False,
        rows=None,
    ):
        with use_backend(self.backend):
            return token_log_probs_and_entropy(
                logits,
                targets,
                tp_group=tp_group,
                chunk_size=chunk_size,
                with_entropy=with_entropy,
                entropy_grad=entropy_grad,
                temperature=temperature,
                donate_logits=donate_logits,
                rows=rows,
            )

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        return hidden_log_probs_and_entropy(
            hidden,
            weight,
            targets,
            tp_group=tp_group,
            chunk_size=chunk_size,
            with_entropy=with_entropy,
            entropy_grad=entropy_grad,
            temperature=temperature,
        )

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
        with use_backend(self.backend):
            out = packed_log_probs_and_entropy(
                logits,
                _batch(inputs),
                tp_group=tp_group,
                cp_group=cp_group,
                cp_mode=inputs.cp_mode,
                chunk_size=chunk_size,
                with_entropy=with_entropy,
                entropy_grad=entropy_grad,
                temperature=temperature,
                response_only=response_only,
                loss_mask_only=loss_mask_only,
            )
            return out.log_probs, out.entropy

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
        terms, tensors = _loss_terms(options)
        with use_backend(self.backend):
            out = policy_loss(
                logits,
                _batch(inputs),
                advantages=advantages,
                old_log_probs=old_log_probs,
                eps_clip=eps_clip,
                eps_clip_high=eps_clip_high,
                entropy_coef=entropy_coef,
                with_entropy=with_entropy,
                tp_group=tp_group,
                cp_group=cp_group,
                cp_mode=inputs.cp_mode,
                chunk_size=chunk_size,
                temperature=temperature,
                response_only=response_only,
                loss_mask_only=loss_mask_only,
                terms=terms,
                **tensors,
            )
            return out.loss, out.log_probs, out.entropy

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
        terms, tensors = _loss_terms(options)
        return token_policy_loss(
            log_probs,
            old_log_probs,
            advantages,
            loss_mask,
            eps_clip=eps_clip,
            eps_clip_high=eps_clip_high,
            entropy=entropy,
            entropy_coef=entropy_coef,
            terms=terms,
            **tensors,
        )

    def sampling_log_probs(
        self, logits, targets, kept, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature, on_outside
    ):
        """impl's sampling path (``impl.sampling``): CSR, dense or derived kept set; torch only (no Triton kernel)."""
        options = dict(
            tp_group=tp_group,
            chunk_size=chunk_size,
            with_entropy=with_entropy,
            entropy_grad=entropy_grad,
            temperature=temperature,
            on_outside=on_outside,
        )
        return kept_set_log_probs(logits, targets, **_kept_arguments(kept), **options)

    def sampling_packed_log_probs(
        self,
        logits,
        inputs,
        kept,
        *,
        tp_group,
        cp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        on_outside,
    ):
        """impl's packed sampling path (``impl.sampling_packed``): the token-level sampling call per CP slice."""
        out = packed_sampling_log_probs_and_entropy(
            logits,
            _batch(inputs),
            **_kept_arguments(kept),
            tp_group=tp_group,
            cp_group=cp_group,
            cp_mode=inputs.cp_mode,
            chunk_size=chunk_size,
            with_entropy=with_entropy,
            entropy_grad=entropy_grad,
            temperature=temperature,
            on_outside=on_outside,
        )
        return out.log_probs, out.entropy


def _kept_arguments(kept) -> dict:
    """``KeptSet`` as impl's keyword arguments (one form set, the others None)."""
    return dict(
        kept_ids=kept.ids,
        kept_offsets=kept.offsets,
        kept_mask=kept.dense,
        top_k=kept.top_k,
        top_p=kept.top_p,
        min_p=kept.min_p,
    )


def _loss_terms(options) -> tuple:
    """``PolicyOptions`` as impl's ``LossTerms`` plus its per-sample tensors (None: the defaults)."""
    if options is None:
        return None, {}
    names = [f.name for f in fields(LossTerms)]
    terms = LossTerms(**{name: getattr(options, name) for name in names})
    return terms, {"ref_log_probs": options.ref_log_probs, "rollout_log_probs": options.rollout_log_probs}
