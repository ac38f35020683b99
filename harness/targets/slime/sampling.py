"""slime's keep-mask replay (``calculate_log_probs_and_entropy(..., log_prob_keep_mask=)``) as a sampling target.

``--target harness.targets.slime.sampling:SlimeSamplingTarget`` with
``LPH_SLIME_PATH`` at a checkout whose ``calculate_log_probs_and_entropy``
takes ``log_prob_keep_mask`` (slime #2102 and later; an older revision
declares no ``sampling*`` capability and its sampling checks read
UNSUPPORTED). The token, packed and policy entry points are the parent
adapter's (``harness.targets.slime.adapter``).

slime replays, never derives (docs/sampling.md, "What the trainers do"): its
trainer builds a bool ``[rows, V_local]`` keep mask per TP rank from the
rollout's CSR (``_build_topp_keep_mask``), and ``_VocabParallelLogProbEntropy``
masks the log-prob's logits with it, restoring the sampled token's logit on
the rank that owns it. The adapter hands the harness's per-rank mask to that
call, as the trainer does, with the logits divided by the temperature first
(slime's ``get_log_probs_and_entropy`` does so before masking).

Declared: ``sampling``, ``sampling_dense``, ``sampling_force_keep`` and
``chunking`` (``chunk_size`` splits the mask with the logits); ``temperature``
as the parent declares it. Not declared: ``sampling_csr`` (the CSR is expanded
by the trainer before this call), ``sampling_derived`` / ``sampling_min_p``,
``sampling_entropy`` (slime's entropy stays over the full vocabulary: "logprob
only; entropy stays unmasked"), ``sampling_error`` and ``sampling_neg_inf``
(the target is always force-kept).
"""

from __future__ import annotations

import sys

from harness.targets.slime.adapter import SlimeTarget, _accepted, _fp32

KEEP_MASK = "log_prob_keep_mask"


class SlimeSamplingTarget(SlimeTarget):
    """slime's adapter plus its keep-mask log-prob (see the module docstring)."""

    def __init__(self, root=None):
        super().__init__(root)
        if self.api.token_fn is not None and KEEP_MASK in self.api.token_parameters:
            added = {"sampling", "sampling_dense", "sampling_force_keep"}
            if "chunk_size" in self.api.token_parameters:
                added.add("chunking")
            self.capabilities = self.capabilities | added

    def sampling_log_probs(
        self, logits, targets, kept, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature, on_outside
    ):
        if "sampling" not in self.capabilities:
            raise ValueError(f"{self.name}: calculate_log_probs_and_entropy has no {KEEP_MASK} at this revision")
        if kept.form != "dense":
            raise ValueError(f"{self.name}: slime takes the kept set as a dense per-rank keep mask only")
        if with_entropy:
            raise ValueError(f"{self.name}: slime's entropy is over the full vocabulary, not the kept set")
        if temperature != 1.0:
            self._need("temperature", f"temperature={temperature}")
        api = self.api
        with self._calling(tp_group, None):
            group = sys.modules["megatron.core.parallel_state"].get_tensor_model_parallel_group()
            scores = _fp32(logits)
            if temperature != 1.0:
                scores = scores / temperature
            options = _accepted(api.token_parameters, chunk_size=self._chunk(chunk_size))
            log_probs, _ = api.token_fn(
                scores, targets, group, with_entropy=False, log_prob_keep_mask=kept.dense, **options
            )
        return log_probs.squeeze(-1), None
