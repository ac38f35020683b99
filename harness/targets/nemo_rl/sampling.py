"""NeMo-RL's sampling replay (``DistributedLogprobWithSampling`` and its chunked twin) as a sampling target.

``--target harness.targets.nemo_rl.sampling:NemoRLSamplingTarget`` with
``LPH_NEMO_RL_PATH`` at a checkout (loaded as ``harness.targets.nemo_rl.token``
loads it; nothing copied). The token and packed entry points are the parent
adapter's; this one adds ``sampling_log_probs`` when the revision has both
Functions.

NeMo-RL derives ``K`` on the trainer from the trainer's own logits
(docs/sampling.md, "What the trainers do"): it moves the vocab-parallel logits
to full rows with an all-to-all, applies ``apply_top_k_top_p`` there and takes
``log_softmax`` + gather. Mapping, as a NeMo caller would do it:

* the harness's ``[rows, V_local]`` shard is ``B = 1``; NeMo needs ``B·S``
  divisible by the TP size ("set make_sequence_length_divisible_by"), so the
  rows are padded with zero logits (target 0) up to a multiple of it and the
  padding's outputs dropped (it gets no gradient);
* ``chunk_size`` selects the chunked Function, rounded up to a multiple of
  the TP size (NeMo refuses others);
* ``top_k = None`` and ``top_p = None`` are NeMo's ``None`` and ``1.0``.

Declared: ``sampling``, ``sampling_derived``, ``sampling_neg_inf`` (a target
outside NeMo's ``K`` gets ``-inf``: the masked ``log_softmax``), ``chunking``.
Not declared, each an absence in NeMo's code: ``sampling_csr`` /
``sampling_dense`` (no given-``K`` form), ``sampling_ties_all`` (its top-p keeps the
copies of a tied crossing value the mass needs, as vLLM does), ``sampling_min_p``
(``TrainingSamplingParams`` has none), ``sampling_entropy`` (its entropy is
over the full vocabulary), ``sampling_error`` / ``sampling_force_keep``, and
``temperature`` (applied by NeMo's caller before these Functions).
"""

from __future__ import annotations

import torch

from harness.targets.nemo_rl.token import NemoRLTarget

SAMPLING_FUNCTIONS = ("DistributedLogprobWithSampling", "ChunkedDistributedLogprobWithSampling")


class NemoRLSamplingTarget(NemoRLTarget):
    """NeMo-RL's adapter plus its ``*WithSampling`` Functions (see the module docstring)."""

    def _capabilities(self) -> frozenset:
        caps = set(super()._capabilities())
        if all(hasattr(self._module, name) for name in SAMPLING_FUNCTIONS):
            caps |= {"sampling", "sampling_derived", "sampling_neg_inf", "chunking"}
        return frozenset(caps)

    def sampling_log_probs(
        self, logits, targets, kept, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature, on_outside
    ):
        self._refuse(temperature)
        if kept.form != "derived" or kept.min_p is not None:
            raise ValueError(f"{self.name}: only top_k / top_p derived on the trainer (got {kept})")
        if with_entropy:
            raise ValueError(f"{self.name}: no entropy over the kept set (capability not declared)")
        group, _, _ = self._shard(logits, tp_group)
        tp = 1 if tp_group is None else torch.distributed.get_world_size(tp_group)
        rows = logits.shape[0]
        pad = (-rows) % tp
        padded = torch.cat([logits, logits.new_zeros(pad, logits.shape[1])]) if pad else logits
        padded_targets = torch.cat([targets, targets.new_zeros(pad)]) if pad else targets
        top_p = 1.0 if kept.top_p is None else kept.top_p
        module = self._module
        with self._calling(tp_group, None):
            if chunk_size is None:
                log_probs = module.DistributedLogprobWithSampling.apply(
                    padded.unsqueeze(0), padded_targets.unsqueeze(0), group, kept.top_k, top_p, False
                )
            else:
                chunk = -(-chunk_size // tp) * tp
                log_probs = module.ChunkedDistributedLogprobWithSampling.apply(
                    padded.unsqueeze(0), padded_targets.unsqueeze(0), group, kept.top_k, top_p, chunk, False
                )
        return log_probs.squeeze(0)[:rows], None
