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
        "token_policy_loss",  # token_policy_loss: the same loss from [B, R] log-prob matrices (no logits)
        "token_policy_entropy",  # ... with its entropy bonus (entropy_coef != 0) aggregated like the loss's other terms
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
        # policy_loss(..., options=PolicyOptions(...)): each non-default option needs its own capability
        "policy_gspo",  # kind="gspo": GSPO's sequence-level ratio (GSPO-token form)
        "policy_cispo",  # kind="cispo": detached clipped ratio times log-prob
        "policy_dual_clip",  # dual_clip_c with kind="ppo": the loss capped at c|A| where A < 0
        "policy_gspo_dual_clip",  # dual_clip_c with kind="gspo"
        "policy_kl_ratio_weighted",  # kl_ratio_weighted: the KL term times the ratio (with its gradient)
        *(f"policy_kl_{kind}" for kind in ("k1", "k2", "k3", "low_var_kl", "abs")),  # a KL loss term of that kind
        # rollout_correction at rollout_level: policy_<tis|mis|rs>_<token|sequence|geometric>
        *(f"policy_{mode}_{level}" for mode in ("tis", "mis", "rs") for level in ("token", "sequence", "geometric")),
        *(f"policy_{mode}_floor" for mode in ("tis", "mis", "rs")),  # rollout_floor: a lower bound on the weight
        # aggregation other than sum-of-sample-mean: policy_agg_<mode>
        *(
            f"policy_agg_{mode}"
            for mode in ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean")
            + ("seq-mean-token-sum-norm",)
        ),
        "token_rows",  # token_log_probs(..., rows=index): only the selected rows evaluated, the others' gradient 0
        "topology_invariant",  # a row's values and gradient are the same bits at every TP degree, CP layout, chunk
        # its own code takes this rank's vocabulary shard and the TP group, so what TP ranks disagree on is its to
        # refuse (a library that does not shard the vocabulary runs behind a gather: upstream/whole_vocab.py)
        "vocab_parallel",
    }
)
# Sampling-distribution replay (docs/sampling.md): sampling_log_probs over a kept set K.
SAMPLING_CAPABILITIES = frozenset(
    {
        "sampling",  # sampling_log_probs (token level), with at least one form of K below
        "sampling_csr",  # K given as CSR of global ids (KeptSet.ids / .offsets)
        "sampling_dense",  # K given as this rank's bool [rows, V_local] keep mask (KeptSet.dense)
        "sampling_derived",  # K derived from top_k / top_p, a global rule over the TP group (ties at the k-th kept)
        "sampling_ties_all",  # ... keeping every tied copy of the boundary value (top-k and top-p), as the oracle
        "sampling_min_p",  # ... and from min_p (before top-k, after the temperature, as vLLM applies it)
        "sampling_entropy",  # the entropy over K (with_entropy=True)
        "sampling_error",  # on_outside="error": a target outside K raises on every rank
        "sampling_force_keep",  # on_outside="force_keep": K := K + {target} (slime's rule)
        "sampling_neg_inf",  # on_outside="neg_inf": log-prob -inf with gradient 0 (NeMo-RL's behaviour)
        "sampling_packed",  # sampling_packed_log_probs: a packed batch (CP as cp_zigzag / cp_allgather, bshd) over K
    }
)
CAPABILITIES = CAPABILITIES | SAMPLING_CAPABILITIES
# The capabilities that name a Target method a check calls. A check calls one of them, fixed by its code (a
# level it is written for), never chosen by a drawn value: a target without it can run no example of the check,
# so ``harness.checks.running.require`` reports the check UNSUPPORTED at its first example instead of drawing
# hundreds more to reject. ``sampling_packed`` is not here: a sampling Case draws whether it is packed.
ENTRY_POINTS = frozenset({"token", "packed", "policy_loss", "token_policy_loss", "hidden", "sampling"})


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


@dataclass(frozen=True)
class KeptSet:
    """The sampler's kept set ``K`` as the harness hands it to a target, in exactly one form.

    Rows: at token level, one per logits row. At packed level
    (``sampling_packed_log_probs``), one per RESPONSE row this rank's logits
    hold, in the order of those rows: every response token (samples in order)
    without CP; the rank's two zigzag chunks of each sample under zigzag CP;
    the response rows of the rank's contiguous slice under allgather CP. The
    harness slices ``K`` along with the rows, like any per-row data.

    Attributes:
        ids, offsets: CSR of GLOBAL token ids, the same on every TP rank: row
            ``r`` keeps ``ids[offsets[r]:offsets[r+1]]`` (vLLM's ``SamplingMask``).
        dense: this TP rank's bool ``[rows, V_local]`` keep mask (slime's form).
        top_k, top_p, min_p: the sampling parameters; the target derives ``K``
            from the logits (``None`` disables a filter; vLLM's order: min-p, top-k,
            top-p, after the temperature).
    """

    ids: object = None
    offsets: object = None
    dense: object = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None

    @property
    def form(self) -> str:
        """``"csr"``, ``"dense"`` or ``"derived"`` (the capability ``sampling_<form>`` it needs)."""
        if self.ids is not None:
            return "csr"
        return "dense" if self.dense is not None else "derived"


@dataclass(frozen=True)
class PolicyOptions:
    """What the policy loss computes beyond PPO-clip with ``sum-of-sample-mean`` (docs/policy-losses.md).

    The harness passes ``options=`` to ``Target.policy_loss`` only when some
    field differs from its default, and only to a target declaring the
    capability each such field needs (``capabilities()``): an adapter that
    knows none of them keeps the plain signature. Per-sample tensors
    (``ref_log_probs``, ``rollout_log_probs``) are in the same view as the
    advantages (this CP rank's zigzag view under context parallelism); at
    token level (``Target.token_policy_loss``) they are ``[B, R]`` matrices
    like the log-probs. The same capabilities gate the options at both levels.

    Attributes:
        kind: ``"ppo"``, ``"gspo"`` (sequence ratio ``exp(mean_t m_t (logp - old))``
            in the GSPO-token form) or ``"cispo"`` (``-sg(clip(r)) A logp``).
        dual_clip_c: where ``A < 0``, the per-token loss is capped at ``-c A`` (c > 1).
        kl_kind, kl_coef: ``+ kl_coef * agg(kl(logp, ref))`` with gradient; ``k1 = d``,
            ``k2 = d^2/2``, ``k3 = exp(-d) + d - 1``, ``low_var_kl`` (k3 clamped: verl),
            ``abs = |d|``, ``d = logp - ref``.
        kl_ratio_weighted: the per-token KL times the ratio ``exp(logp - old)``.
        ref_log_probs: the reference policy's log-probs (needed when ``kl_coef != 0``).
        rollout_correction: ``None``, ``"tis"`` (weights ``clamp(w, floor, cap)``),
            ``"mis"`` (``w`` inside ``[floor, cap]``, else 0) or ``"rs"`` (1 inside, 0 outside),
            ``w = exp(old - rollout)`` per token, or per sample at ``rollout_level``
            ``"sequence"`` (product) / ``"geometric"`` (geometric mean); detached.
        rollout_log_probs: the rollout engine's log-probs (needed with a rollout correction).
        aggregation: ``"sum-of-sample-mean"`` (the default contract), ``"token-mean"``,
            ``"token-sum"``, ``"seq-mean-token-sum"``, ``"seq-mean-token-mean"`` or
            ``"seq-mean-token-sum-norm"`` (``horizon``: its constant length); every
            term (policy, KL, entropy) uses it, normalised over the WHOLE batch.
    """

    kind: str = "ppo"
    dual_clip_c: float | None = None
    kl_kind: str = "k3"
    kl_coef: float = 0.0
    kl_ratio_weighted: bool = False
    ref_log_probs: list | None = None
    rollout_correction: str | None = None
    rollout_cap: float = 2.0
    rollout_floor: float | None = None
    rollout_level: str = "token"
    rollout_log_probs: list | None = None
    aggregation: str = "sum-of-sample-mean"
    horizon: float | None = None

    def capabilities(self) -> set[str]:
        """The capabilities a target needs to honour these options (empty for the defaults)."""
        needed = set()
        if self.kind != "ppo":
            needed.add(f"policy_{self.kind}")
        if self.dual_clip_c is not None:
            needed.add("policy_dual_clip" if self.kind == "ppo" else f"policy_{self.kind}_dual_clip")
        if self.kl_coef != 0:
            needed.add(f"policy_kl_{self.kl_kind}")
            if self.kl_ratio_weighted:
                needed.add("policy_kl_ratio_weighted")
        if self.rollout_correction is not None:
            needed.add(f"policy_{self.rollout_correction}_{self.rollout_level}")
            if self.rollout_floor is not None:
                needed.add(f"policy_{self.rollout_correction}_floor")
        if self.aggregation != "sum-of-sample-mean":
            needed.add(f"policy_agg_{self.aggregation}")
        return needed


class Unsupported(Exception):
    """Raised by the harness when a check needs a capability the target lacks."""

    failure_kind = "unsupported"  # harness.checks.failure.UNSUPPORTED: the verdict reads this, not the message


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

    def sampling_log_probs(
        self,
        logits,
        targets,
        kept: KeptSet,
        *,
        tp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        on_outside,
    ):
        """Return ``(log_probs [rows], entropy [rows] or None)`` of the processed distribution over ``kept``.

        ``log p~_t = z_t - lse_K(z)`` and ``H~ = -sum_{v in K} p~_v log p~_v`` with
        ``z = logits / temperature``, gradient 0 outside ``K`` (docs/sampling.md).
        ``on_outside`` (``"error"``, ``"force_keep"``, ``"neg_inf"``) is the rule
        for a target outside ``K``; the target declares which it honours.
        """
        raise NotImplementedError

    def sampling_packed_log_probs(
        self,
        logits,
        inputs: PackedInputs,
        kept: KeptSet,
        *,
        tp_group,
        cp_group,
        chunk_size,
        with_entropy,
        entropy_grad,
        temperature,
        on_outside,
    ):
        """Return ``(list of log_probs_i, list of entropy_i or None)`` over ``kept`` for a packed batch.

        As ``sampling_log_probs`` on the response rows of ``packed_log_probs``'s
        batch (the response tokens are the sampled tokens; only response rows are
        evaluated, every other row's gradient is 0); ``kept`` has one row per
        response row this rank holds (``KeptSet``); outputs are per sample, this
        CP rank's zigzag view under context parallelism.
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
        """Return ``(loss scalar, list of log_probs_i, list of entropy_i or None)``.

        A target declaring any ``policy_*`` option capability also takes
        ``options: PolicyOptions`` (passed only when not the default).
        """
        raise NotImplementedError

    def capabilities_for(self, needed) -> frozenset:
        """What the entry point a check needing ``needed`` calls declares (all of ``capabilities`` by default).

        A family's paths may differ in their options: SkyRL's hidden-state
        path has no entropy while its token path has, so a hidden-state example
        with entropy reads UNSUPPORTED while the token path's entropy checks run
        (``harness.targets.upstream.family``: ``Entry.lacks``).
        """
        return frozenset(self.capabilities)

    def combination_needs(self, options: PolicyOptions) -> set[str]:
        """Capabilities a COMBINATION of options needs beyond each option's own (``PolicyOptions.capabilities``).

        For an implementation that has each option but not every combination
        of them (NeMo-RL's CISPO under token-mean only): names it does not
        declare, so the token-level checks report such a Case UNSUPPORTED
        instead of running it as something else. Empty by default.
        """
        return set()

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
    ):
        """Return the scalar policy loss over ``[B, R]`` response matrices (capability ``token_policy_loss``).

        Row ``i`` of every argument is sample ``i``'s response, left-aligned and
        padded to the longest response ``R`` with ``loss_mask`` 0 (values there
        are 0); ``log_probs`` (float32, requires grad) and ``entropy`` (float32
        or None; requires grad when ``entropy_coef != 0``) are leaves the
        harness differentiates. The loss is the one ``policy_loss`` defines
        (``sum-of-sample-mean`` unless ``options`` says otherwise) over the
        whole batch; ``entropy`` None means no bonus term. A target declaring
        ``policy_*`` option capabilities also takes ``options: PolicyOptions``
        (passed only when not the default; its ``ref_log_probs`` and
        ``rollout_log_probs`` are ``[B, R]``).
        """
        raise NotImplementedError
