"""The historic bugs re-created as small, named source changes to ``impl/``.

Each Mutant is an exact snippet of an ``impl`` module and its replacement,
applied at import time when ``LPH_MUTANT=<name>`` is set (loader.py), in the
test process AND in every rank process. It names the regression tests that
must fail on it and the target they run against (``impl``, or
``impl-triton`` for the bugs re-created in the Triton backend, whose
regressions then run under Triton's CPU interpreter): ``nox -s mutants`` (and ``tests/test_mutants.py`` inside
``nox -s tests``) proves that they do. If ``impl`` changes so a snippet no
longer matches, applying the mutant fails loudly instead of testing nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    module: str
    original: str
    replacement: str
    killed_by: tuple
    target: str = "impl"


MUTANTS = (
    Mutant(
        name="inverted_no_grad_gate",
        bug="docs/bugs.md #1 (slime PR #1185): the entropy is detached exactly when its coefficient is non-zero",
        module="impl.policy_loss",
        original="return bool(with_entropy) and entropy_coef != 0",
        replacement="return bool(with_entropy) and entropy_coef == 0",
        killed_by=("regressions/test_inverted_no_grad_gate.py",),
    ),
    Mutant(
        name="borrow_restore_saved_logits",
        bug="docs/bugs.md #2 (SkyRL #1648): the backward subtracts from the saved logits in place, then adds back",
        module="impl.token_level",
        original=(
            "        log_p = _shifted_rows("
            "logits, row_index, start, end, shift[start:end], temperature, *workspace_pair)\n"
        ),
        replacement=(
            "        borrowed = logits.detach()[start:end]\n"
            "        offset = (shift[start:end] * temperature).unsqueeze(1).to(borrowed.dtype)\n"
            "        borrowed.sub_(offset)\n"
            "        log_p = borrowed.to(torch.float32, copy=True).div_(temperature)\n"
            "        borrowed.add_(offset)\n"
        ),
        killed_by=("regressions/test_inplace_version_counter.py",),
    ),
    Mutant(
        name="forward_shifts_logits_in_place",
        bug="docs/bugs.md #2 (verl #1672, Megatron cross-entropy): the forward writes its shifted logits over the "
        "input",
        module="impl.token_level",
        original="        return torch.sub(chunk, shift, out=out)\n",
        replacement=(
            "        in_place = chunk.dtype == torch.float32  # 'save a buffer' when no cast is needed\n"
            "        return chunk.sub_(shift) if in_place else torch.sub(chunk, shift, out=out)\n"
        ),
        killed_by=("regressions/test_inplace_version_counter.py",),
    ),
    Mutant(
        name="one_hot_backward",
        bug="docs/bugs.md #3 (SkyRL #1650, NeMo-RL #4114): the chunked backward builds an int64 one_hot over the "
        "vocabulary plus a float copy to place the target gradient",
        module="impl.token_level",
        original="        add_at_target(grad_chunk, scatter_index[start:end], target_grad[start:end])\n",
        replacement=(
            "        one_hot = torch.nn.functional.one_hot(scatter_index[start:end].squeeze(1), v_local)\n"
            "        grad_chunk.add_(one_hot.float() * target_grad[start:end])\n"
        ),
        killed_by=("regressions/test_one_hot_oom.py",),
    ),
    Mutant(
        name="redistribute_zeros_require_grad",
        bug="docs/bugs.md #4/#5 (slime #1788): a rank holding none of a sample pads with requires_grad=True zeros",
        module="impl.context_parallel",
        original="    full = values.new_zeros(total_responses).index_copy(0, held_flat.to(values.device), values)\n",
        replacement=(
            "    full = values.new_zeros(total_responses).index_copy(0, held_flat.to(values.device), values)\n"
            "    starts = [sum(batch.response_lengths[:i]) for i in range(len(batch.response_lengths))]\n"
            "    missing = [not bool(((held_flat >= s) & (held_flat < s + r)).any())\n"
            "               for s, r in zip(starts, batch.response_lengths) if r]\n"
            "    if not values.requires_grad and any(missing):\n"
            "        full = full.detach().requires_grad_(True)\n"
        ),
        killed_by=("regressions/test_allgather_cp_regrad.py", "regressions/test_dsa_hang.py"),
    ),
    Mutant(
        name="empty_cp_rank_skips_graph",
        bug="docs/bugs.md #5 (hang class): a CP rank holding no response row returns graph-free values, "
        "so only the other ranks all-reduce in backward",
        module="impl.context_parallel",
        original=(
            "    flat_rows, flat_targets, held_flat = allgather_plan(logits, batch, cp_group)\n"
            "    log_probs, entropy = _evaluate(logits, flat_rows, flat_targets, options)\n"
        ),
        replacement=(
            "    flat_rows, flat_targets, held_flat = allgather_plan(logits, batch, cp_group)\n"
            "    if flat_rows:\n"
            "        log_probs, entropy = _evaluate(logits, flat_rows, flat_targets, options)\n"
            "    else:\n"
            "        log_probs = logits.new_zeros(0, dtype=torch.float32)\n"
            "        entropy = log_probs if options['with_entropy'] else None\n"
        ),
        killed_by=("regressions/test_dsa_hang.py",),
    ),
    Mutant(
        name="tp_rank_without_targets_skips_stats_gather",
        bug="docs/bugs.md #5, hang class, another mechanism: a TP rank whose vocabulary shard holds none of the "
        "targets skips the statistics all-gather in FORWARD ('nothing to add'), so its peers wait in it",
        module="impl.token_level",
        original="        stats = sum_in_rank_order(stats, tp_group)\n",
        replacement=(
            "        if tp_world(tp_group)[0] == 1 or bool(in_shard.any()):  # no target here: 'nothing to add'\n"
            "            stats = sum_in_rank_order(stats, tp_group)\n"
        ),
        killed_by=("regressions/test_dsa_hang.py",),
    ),
    Mutant(
        name="no_cp_agreement",
        bug="no metadata agreement (impl/agreement.py, the guard against ranks called inconsistently): "
        "CP ranks never compare their call's metadata, so ranks given different slices, "
        "lengths or options compute silently wrong values or hang",
        module="impl.context_parallel",
        original='    agree(cp_group, "cp_group", fields, local_error=local_error, device=device, fix=CP_CALL_FIXES)\n',
        replacement="    if local_error is not None:\n        raise local_error\n",
        killed_by=("properties/test_bad_inputs_distributed.py",),
    ),
    Mutant(
        name="no_tp_agreement",
        bug="no metadata agreement (impl/agreement.py, the guard against ranks called inconsistently): "
        "TP ranks never compare their call's metadata, so shards of different widths or "
        "different entropy flags meet in a mismatched all-gather",
        module="impl.token_level",
        original=(
            "    agree(\n"
            "        tp_group,\n"
            '        "tp_group",\n'
            "        token_call_fields(logits, rows, chunk_size, with_entropy, entropy_grad, temperature),\n"
            "        local_error=local_error,\n"
            '        device=logits.device if isinstance(logits, torch.Tensor) else "cpu",\n'
            "        fix=TOKEN_CALL_FIXES,\n"
            "    )\n"
        ),
        replacement="    if local_error is not None:\n        raise local_error\n",
        killed_by=("properties/test_bad_inputs_distributed.py",),
    ),
    Mutant(
        name="cp_group_without_mode_accepted",
        bug="no metadata agreement (impl/agreement.py, the guard against ranks called inconsistently): "
        "a CP group of size > 1 with cp_mode='none' is accepted: every CP rank treats its "
        "share as the whole batch",
        module="impl.context_parallel",
        original=(
            '    if cp_mode == "none":\n'
            "        raise ValueError(\"a CP group of size > 1 was given with cp_mode='none'; "
            "pass cp_mode='zigzag' or 'allgather'\")\n"
        ),
        replacement="",
        killed_by=("properties/test_bad_inputs_distributed.py",),
    ),
    Mutant(
        name="cp_mode_without_group_accepted",
        bug="no metadata agreement (impl/agreement.py, the guard against ranks called inconsistently): "
        "a CP mode without a CP group (None) is accepted: each rank runs the layout as cp=1",
        module="impl.context_parallel",
        original='        if cp_mode != "none":\n            _validate(logits, batch, cp_mode, loss_mask_only)\n',
        replacement='        if cp_mode == "no such mode":\n',
        killed_by=("properties/test_bad_inputs_distributed.py",),
    ),
    Mutant(
        name="masked_shard_rescale_nan",
        bug="input class 'a TP shard whose logits are all -inf for a row' (a mask confining a row's support to "
        "other shards): the rescale of a shard's statistics from its local row max to the global one forgets the "
        "log-zero clamp, so a shard with local max -inf computes 0 * -inf = NaN for the row's entropy (the Triton "
        "backend's path; every finite local max, however far below the global one, is unaffected)",
        module="impl.row_stats",
        original="    clamped = delta.clamp(min=LOG_ZERO_FLOOR)\n",
        replacement="    clamped = delta  # 'exp(-inf) is 0 anyway'\n",
        killed_by=("properties/test_forward_parity.py",),
        target="impl-triton",
    ),
    # What consumes the log-probs (docs/policy-losses.md): one mutant per loss option, in impl.policy_terms.
    Mutant(
        name="kl_term_detached",
        bug="docs/bugs.md #1's shape for the KL loss term: the KL estimator is computed from detached log-probs, so "
        "the penalty is reported but never pulls the policy toward the reference",
        module="impl.policy_terms",
        original="        d = _masked(lp - ref.to(lp), m)\n",
        replacement="        d = _masked(lp.detach() - ref.to(lp), m)\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="dual_clip_on_positive_advantages",
        bug="dual-clip PPO with the advantage's sign flipped: the c|A| cap is applied where A > 0 (capping every "
        "positive-advantage token) instead of where A < 0",
        module="impl.policy_terms",
        original="    return torch.where(advantage < 0, torch.minimum(pg, -dual_clip_c * advantage), pg)\n",
        replacement="    return torch.where(advantage > 0, torch.minimum(pg, -dual_clip_c * advantage), pg)\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="aggregation_normaliser_per_cp_rank",
        bug="the loss aggregation's normaliser (token count, samples) taken from this CP rank's part of the batch "
        "instead of the whole batch, so the loss changes with the context-parallel layout",
        module="impl.policy_loss",
        original="        return aggregate(values, masks, counts, terms.aggregation, full_masks, terms.horizon)\n",
        replacement="        return aggregate(values, masks, counts, terms.aggregation, masks, terms.horizon)\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="gspo_ratio_per_token",
        bug="GSPO computed with the per-token ratio exp(logp_t - old_t) instead of the sequence ratio "
        "exp(mean_t(logp_t - old_t)): plain PPO under GSPO's name",
        module="impl.policy_terms",
        original="        means = sample_means(log_ratios, masks, counts, cp_group)\n",
        replacement="        means = [lr.detach() for lr in log_ratios]\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="sequence_statistic_per_cp_rank",
        bug="a sequence-level statistic (GSPO's mean log-ratio, the sequence/geometric rollout weight) taken over "
        "this CP rank's part of each sample: no sum over the CP group",
        module="impl.policy_terms",
        original="    return sum_in_rank_order(local, cp_group)\n",
        replacement="    return local\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="cispo_weight_not_detached",
        bug="CISPO's clipped importance weight keeps its gradient: the loss becomes -clip(r) A logp differentiated "
        "through r as well, doubling the unclipped tokens' gradient",
        module="impl.policy_terms",
        original="            -r.clamp(1 - eps_low, 1 + eps_high).detach() * a * _masked(lp, m)\n",
        replacement="            -r.clamp(1 - eps_low, 1 + eps_high) * a * _masked(lp, m)\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="tis_truncated_from_below",
        bug="truncated importance sampling on the wrong side: the rollout weight is clamped from below at the cap "
        "(every weight at least C) instead of from above",
        module="impl.policy_terms",
        original="            weights.append(w.clamp(terms.rollout_floor, terms.rollout_cap))\n",
        replacement="            weights.append(w.clamp(min=terms.rollout_cap))\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="mis_truncates_instead_of_masking",
        bug="masked importance sampling that truncates: a weight outside [floor, cap] is clamped (TIS) instead of "
        "zeroed, so the mismatched tokens still drive the update",
        module="impl.policy_terms",
        original="            weights.append(torch.where(keep, w, 0.0))\n",
        replacement="            weights.append(\n"
        "                torch.where(keep, w, w.clamp(terms.rollout_floor, terms.rollout_cap))\n"
        "            )\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="rejection_keeps_the_weight",
        bug="rejection sampling that reweights: a kept token gets its importance weight w instead of 1, so the "
        "'reject only' correction also rescales every accepted token",
        module="impl.policy_terms",
        original="            weights.append(keep.to(w.dtype))\n",
        replacement="            weights.append(torch.where(keep, w, 0.0))\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="entropy_term_ignores_aggregation",
        bug="the entropy bonus aggregated with a fixed per-sample mean whatever the loss's aggregation mode, so its "
        "weight against the policy term changes with batch composition",
        module="impl.policy_loss",
        original="        loss = loss - entropy_coef * agg(entropy)\n",
        replacement="        loss = loss - entropy_coef * aggregate(\n"
        '            entropy, masks, counts, "sum-of-sample-mean", [], None\n'
        "        )\n",
        killed_by=("properties/test_policy_losses.py",),
    ),
    Mutant(
        name="token_loss_counts_padding",
        bug="the token-level policy loss (impl.token_policy_loss, [B, R] matrices) takes its normalisers from the "
        "matrix's width instead of the loss mask: every padded position counts as a token, so a sample's mean and "
        "the batch's token count change with the longest response in the batch",
        module="impl.token_policy_loss",
        original="        full_masks=masks,\n",
        replacement="        full_masks=[torch.ones_like(m) for m in masks],\n",
        killed_by=("properties/test_token_policy_losses.py",),
    ),
    Mutant(
        name="tp_shard_sums_own_order",
        bug="docs/topology.md: each TP shard sums its row in its own order (one tree per shard, not a subtree of "
        "the tree over the global vocabulary), so a row's log-prob, entropy and gradient change in the last bits "
        "with the TP degree: a rollout at TP 1 and training at TP 4 no longer agree exactly",
        module="impl.row_stats",
        original="    return leaves // tp if leaves % tp == 0 else 1\n",
        replacement="    return 1  # 'each rank sums its own shard'\n",
        killed_by=("properties/test_topology.py",),
    ),
    Mutant(
        name="hidden_last_block_unpadded",
        bug="docs/topology.md: the hidden-state path's last row block runs at its own row count ('padding with "
        "zeros cannot change a sum'), so a BLAS picks another kernel for it and a row's bits depend on how many "
        "rows share its block: the same row after other rows gets other last bits",
        module="impl.fixed_gemm",
        original="        if end - start == MATMUL_BLOCK_ROWS and _aligned(self.hidden[start:end]):\n",
        replacement="        if _aligned(self.hidden[start:end]):  # 'the last block needs no padding'\n",
        killed_by=("properties/test_topology.py",),
    ),
)


# The named regressions' bugs that apply to a kernel, re-created in the Triton backend (docs/triton.md says
# which do not apply and why: one_hot is a torch-code mechanism; bugs 4/5's CP redistribution sits above it).
TRITON_MUTANTS = (
    Mutant(
        name="triton_entropy_term_dropped",
        bug="docs/bugs.md #1 in the kernel: the Triton backward reads its entropy flag inverted and launches the "
        "gradient kernel without the entropy term exactly when an entropy gradient arrives (coef != 0)",
        module="impl.triton.launch",
        original="    entropy_term = entropy is not None  # an entropy gradient arrived: "
        "the gate is on and the loss uses the entropy\n",
        replacement="    entropy_term = entropy is None  # inverted\n",
        killed_by=("regressions/test_inverted_no_grad_gate.py",),
        target="impl-triton",
    ),
    Mutant(
        name="triton_forward_stores_shifted_logits",
        bug="docs/bugs.md #2 in the kernel (verl #1672, Megatron cross-entropy): the forward kernel stores its "
        "shifted tile back over the input logits; a Triton store bumps no version counter",
        module="impl.triton.kernels",
        original="        probs = tl.exp(shifted)\n",
        replacement=(
            "        tl.store(base + cols.to(tl.int64)[None, :] * stride_col, "
            "shifted.to(logits_ptr.dtype.element_ty), mask=mask)\n"
            "        probs = tl.exp(shifted)\n"
        ),
        killed_by=("regressions/test_inplace_version_counter.py",),
        target="impl-triton",
    ),
    Mutant(
        name="triton_backward_writes_over_logits",
        bug="docs/bugs.md #2 in the kernel: the backward writes the gradient over the logits although they were not "
        "donated ('saves a [rows, V] buffer'), corrupting every other reader of them",
        module="impl.triton.launch",
        original=(
            "    grad_logits = gradient_buffer(logits, row_index, donate)\n    source = None if donate else logits\n"
        ),
        replacement="    grad_logits = gradient_buffer(logits, row_index, True)\n    source = None\n",
        killed_by=("regressions/test_inplace_version_counter.py",),
        target="impl-triton",
    ),
    Mutant(
        name="triton_rank_without_targets_skips_max",
        bug="docs/bugs.md #5, hang class, in the Triton backend's TP combination: a TP rank whose shard holds none of "
        "the targets skips the row-max all-reduce ('its max changes nothing'), so its peers wait in it",
        module="impl.triton.launch",
        original="    all_reduce_max(global_max, tp_group)\n",
        replacement=(
            "    if bool(in_shard.any()):  # no target in this shard: 'its max changes nothing'\n"
            "        all_reduce_max(global_max, tp_group)\n"
        ),
        killed_by=("regressions/test_dsa_hang.py",),
        target="impl-triton",
    ),
)

# Sampling-distribution replay (docs/sampling.md): the three named hazards of impl.sampling / impl.sampling_derive.
SAMPLING_MUTANTS = (
    Mutant(
        name="sampling_full_vocab_normaliser",
        bug="docs/sampling.md 'Why replay': the trainer normalises over the full vocabulary while the rollout "
        "normalised over the kept set K, so every log-prob carries log S (the kept mass)",
        module="impl.sampling",
        original="    rows, columns = unique_entries(rows, columns, logits.shape[1])\n",
        replacement=(
            "    every = torch.ones_like(logits, dtype=torch.bool).nonzero()  # 'K only restricts the sampler'\n"
            "    rows, columns = every[:, 0], every[:, 1]\n"
        ),
        killed_by=("regressions/test_sampling_full_vocab.py",),
    ),
    Mutant(
        name="sampling_target_outside_neg_inf",
        bug="docs/sampling.md 'A target outside K': force-keep is not applied, so a sampled token outside the "
        "recorded K is masked like any other column and its log-prob is -inf (a NaN/inf ratio in the loss)",
        module="impl.sampling",
        original='    if on_outside == "force_keep":\n',
        replacement="    if False:  # force-keep dropped: the sampled token is masked like any column outside K\n",
        killed_by=("regressions/test_sampling_target_outside.py",),
    ),
    Mutant(
        name="sampling_top_k_per_shard",
        bug="docs/sampling.md 'Tensor parallelism': top-k derived per TP shard instead of over the whole row, so "
        "every shard keeps its own k best and K grows with the TP size",
        module="impl.sampling_derive",
        original="            candidates = gather_candidates(z.topk(width, dim=1).values, tp_group)\n",
        replacement="            candidates = z.topk(width, dim=1).values  # 'each rank knows its own top-k'\n",
        killed_by=("regressions/test_sampling_per_shard.py",),
    ),
    Mutant(
        name="sampling_packed_cp_error_one_rank",
        bug="docs/sampling.md 'Packed batches and context parallelism': a target outside K raises only on the CP "
        "rank holding its row; a CP rank holding none returns values (zigzag) or waits in the all-reduce its peer "
        "never reaches (allgather)",
        module="impl.sampling_packed",
        original='    agree(cp_group, "cp_group", {}, local_error=error, device=device, fix={})\n',
        replacement="    if error is not None:  # 'a CP rank reports its own rows'\n        raise error\n",
        killed_by=("properties/test_sampling_packed.py",),
    ),
)

MUTANTS = MUTANTS + TRITON_MUTANTS + SAMPLING_MUTANTS


# Input classes the generator once never drew (a row selection with donation, many low-precision blocks): each
# mutant is exposed by that class only.
INPUT_CLASS_MUTANTS = (
    Mutant(
        name="donated_unselected_rows_keep_logits",
        bug="input class 'donation combined with row selection': with donate_logits=True and rows=, the rows never "
        "evaluated are not zeroed ('their gradient is 0, nothing to write'), so the returned gradient holds the "
        "logits there; without rows, or without donation (a fresh zero buffer), nothing changes",
        module="impl.row_stats",
        original="        buffer.masked_fill_(unselected.unsqueeze(1), 0)\n",
        replacement="        pass  # 'rows never evaluated get no write'\n",
        killed_by=("properties/test_donation.py",),
    ),
    Mutant(
        name="donated_rows_zeroed_before_read",
        bug="input class 'donation combined with row selection', Triton backend: the donated buffer is zeroed "
        "whole before the backward ('unselected rows must read 0') although it IS the logits the kernel reads "
        "its selected rows from, so every selected row's gradient is computed from zeros",
        module="impl.row_stats",
        original="        buffer.masked_fill_(unselected.unsqueeze(1), 0)\n",
        replacement="        buffer.zero_()\n",
        killed_by=("properties/test_donation.py",),
        target="impl-triton",
    ),
    Mutant(
        name="hidden_weight_grad_input_dtype_accumulation",
        bug="input class 'low-precision accumulation across many blocks': the hidden-state path adds each row "
        "block's grad(weight) contribution to a running sum kept in the weight's dtype ('the head is bf16 "
        "anyway'); exact in fp32, and within tolerance in bf16/fp16 over the few blocks the ordinary shapes hold",
        module="impl.fixed_gemm",
        original="                grad_weight[cols].add_(torch.mm(tile[:, : end - start], rows))\n",
        replacement=(
            "                block = tile[:, : end - start].mm(rows).to(self.weight.dtype)\n"
            "                grad_weight[cols].copy_(grad_weight[cols].to(self.weight.dtype).add_(block))\n"
        ),
        killed_by=("properties/test_hidden_states.py",),
    ),
)

MUTANTS = MUTANTS + INPUT_CLASS_MUTANTS


def by_name(name: str) -> Mutant:
    for mutant in MUTANTS:
        if mutant.name == name:
            return mutant
    raise KeyError(f"LPH_MUTANT={name!r} is not a known mutant; known: {[m.name for m in MUTANTS]}")
