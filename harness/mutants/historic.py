"""The five historic bugs of docs/bugs.md and the hang-class agreement checks, re-created in ``impl/``'s torch
path (and the masked-shard rescale of its row statistics).
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant

HISTORIC = (
    Mutant(
        name="inverted_no_grad_gate",
        bug="docs/bugs.md #1 (slime PR #1185): the entropy is detached exactly when its coefficient is non-zero",
        module="impl.policy_loss",
        original="return bool(with_entropy) and entropy_coef != 0",
        replacement="return bool(with_entropy) and entropy_coef == 0",
        killed_by=("regressions/test_inverted_no_grad_gate.py",),
        bug_class="bug 1: entropy-gradient gate",
        representative=True,
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
        bug_class="bug 2: in-place writes",
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
        bug_class="bug 2: in-place writes",
        representative=True,
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
        bug_class="bug 3: memory",
        representative=True,
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
        bug_class="bug 4: CP re-grad",
        representative=True,
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
        bug_class="bug 5: collectives",
        representative=True,
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
        bug_class="bug 5: collectives",
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
        bug_class="metadata agreement",
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
        bug_class="metadata agreement",
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
        bug_class="metadata agreement",
        representative=True,
    ),
    Mutant(
        name="cp_mode_without_group_accepted",
        bug="no metadata agreement (impl/agreement.py, the guard against ranks called inconsistently): "
        "a CP mode without a CP group (None) is accepted: each rank runs the layout as cp=1",
        module="impl.context_parallel",
        original='        if cp_mode != "none":\n            _validate(logits, batch, cp_mode, loss_mask_only)\n',
        replacement='        if cp_mode == "no such mode":\n',
        killed_by=("properties/test_bad_inputs_distributed.py",),
        bug_class="metadata agreement",
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
        # Only the special-values checks draw -inf columns; the rest of the file cannot meet the regime.
        killed_by=(
            "properties/test_forward_parity.py::test_token_forward_parity_special_values",
            "properties/test_forward_parity.py::test_packed_forward_parity_special_values",
        ),
        target="impl-triton",
        bug_class="input class: masked shard",
        representative=True,
    ),
)
