"""What an adapter provides so the suite can check an implementation.

An adapter ("target") presents one implementation of vocab-parallel
log-probs/entropy to every property and regression. It is a class (or an
instance) with a ``name``, a ``capabilities`` set, and any of the three entry
points below. Checks never call an implementation directly: they ask the
target, and a check that needs a capability the target does not declare is
reported UNSUPPORTED (never a silent pass).

Conventions the adapter maps its implementation onto (docs/math.md):

* logits are this rank's contiguous vocabulary shard ``[rows, V_local]`` of
  the TP group (``tp_group`` None means a single rank); targets are GLOBAL ids;
* entropy is ``H = -sum p log p`` (positive), log-probs are ``z_t - lse``;
* outputs are float tensors; per-sample outputs are lists in sample order.

The full protocol, with a worked example, is in docs/targets.md.
"""

from __future__ import annotations

from dataclasses import dataclass

CAPABILITIES = frozenset(
    {
        "token",  # token_log_probs
        "packed",  # packed_log_probs
        "policy_loss",  # policy_loss
        "entropy",  # with_entropy=True
        "entropy_gate",  # entropy_grad=False gives a graph-free entropy
        "chunking",  # chunk_size is honoured
        "temperature",  # temperature != 1
        "response_only",  # rows dropped before the softmax
        "loss_mask_only",  # loss-mask-0 rows dropped too (policy path)
        "bshd",  # qkv_format="bshd"
        "cp_zigzag",  # context parallelism, zigzag (ring-attention) layout
        "cp_allgather",  # context parallelism, allgather layout (DSA models)
        "cp_mode_arg",  # the CP layout is an argument (cp_mode); without it the CP group alone decides
        "donation",  # token_log_probs(..., donate_logits=True) writes the gradient over the logits
        "bit_exact",  # chunking, the entropy gate and response-only change no bit (else: within tolerance)
        "hidden",  # hidden_log_probs: hidden states [rows, H] and this rank's LM-head shard [V_local, H]
        "hidden_tp",  # hidden_log_probs over a TP group (tp > 1): the head sharded by vocabulary rows
        "topology_invariant",  # a row's values and gradient are the same bits at every TP degree, CP layout, chunk
    }
)


@dataclass(frozen=True)
class PackedInputs:
    """A packed batch as the harness describes it to a target.

    Attributes:
        tokens: per sample, its full token ids (length ``T_i``).
        total_lengths: ``T_i`` per sample.
        response_lengths: ``R_i`` per sample.
        loss_masks: per sample, ``R_i`` float zeros/ones.
        qkv_format: ``"thd"`` or ``"bshd"`` (docs/math.md layouts).
        pad_multiple: the alignment the stream (thd) or each row (bshd) was padded to.
        cp_mode: ``"none"``, ``"zigzag"`` or ``"allgather"``; with context
            parallelism the logits are this CP rank's rows (docs/math.md) and the
            per-sample outputs (and the policy loss's advantages and old
            log-probs) are this CP rank's zigzag view of each sample.
    """

    tokens: list
    total_lengths: list
    response_lengths: list
    loss_masks: list
    qkv_format: str
    pad_multiple: int
    cp_mode: str = "none"


class Unsupported(Exception):
    """Raised by the harness when a check needs a capability the target lacks."""


class Target:
    """Base class for adapters: declare ``name`` and ``capabilities``, override entry points."""

    name = "unnamed"
    capabilities: frozenset = frozenset()

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        """Return ``(log_probs [rows], entropy [rows] or None)``."""
        raise NotImplementedError

    def hidden_log_probs(
        self, hidden, weight, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature
    ):
        """Return ``(log_probs [rows], entropy [rows] or None)`` of ``z = hidden @ weight.T / temperature``.

        ``hidden [rows, H]`` is the same on every TP rank, ``weight [V_local, H]``
        is this rank's LM-head shard (vocabulary ids ``[r*V_local, (r+1)*V_local)``);
        gradients must reach both (``hidden``'s summed over the TP group).
        """
        raise NotImplementedError

    def packed_log_probs(
        self,
        logits,
        inputs: PackedInputs,
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
        """Return ``(list of log_probs_i, list of entropy_i or None)``."""
        raise NotImplementedError

    def policy_loss(
        self,
        logits,
        inputs: PackedInputs,
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
    ):
        """Return ``(loss scalar, list of log_probs_i, list of entropy_i or None)``."""
        raise NotImplementedError
