"""verl's packed (thd) level: its own packing, CP split, label roll and CP gather around the logits processor.

verl's Megatron engine (``gptmodel_forward_model_engine`` in
``verl/models/mcore/model_forward.py``, which imports the model stack, so its
few lines are repeated here) runs, for a batch of nested (jagged) sequences:

1. ``preprocess_thd_engine(input_ids, cp_layout=...)``: every sequence padded
   to a multiple of ``tp·cp·2`` (zigzag) or ``tp·cp`` (contiguous), split over
   the CP ranks; the model then produces this rank's logits rows;
2. the logits processor's arguments, each through ``preprocess_thd_engine``
   again: the labels (``input_ids`` themselves) with ``need_roll=True`` (the
   shift to the next token, across the CP split), the per-token temperature
   without;
3. the logits processor (``harness/targets/verl/token.py``) on ``[1, T_local, V_local]``;
4. ``postprocess_thd_engine`` on each output: all-gathered over CP (other
   ranks' rows detached, this rank's with its gradient) and cut back into
   sequences, ``[B, T_i]`` nested, position ``p`` holding the log-prob of token ``p + 1``.

Steps 1, 2 and 4 are verl's functions (``verl/models/mcore/util.py``, loaded
by ``source.mcore_util``). The adapter's part is the re-layout around them:

* in: the harness's rows (docs/math.md: per-sample padding to ``2·cp`` under
  zigzag, none under allgather or without CP) are not verl's (``tp·cp·2``;
  ``tp`` even without CP), so every CP rank gathers all ranks' logits rows
  (gradient summed back to their owner) and takes the rows verl's own split
  puts on it: the split runs on each position's row number (``+ 1``; verl's
  padding becomes row 0, an all-zero row), so the rows are where verl's split
  of the token ids puts their tokens;
* out: each rank holds every position's value (verl's gather) but the
  gradient only of its own rows, as every verl rank computes the same loss
  over the gathered batch; the harness gives each rank the gradient of its
  zigzag view only, so the gathered values pass through ``SumGradientOverGroup``,
  whose backward sums the views' gradients over the CP group (what every verl
  rank's identical loss would give).

Without CP the gather and the sum are skipped (no collective), and where
verl's rows are the harness's in order (one rank, no padding) the logits are
used as they are (a view, no copy). Under CP the gather holds ``cp`` times a
rank's logits: the adapter's cost, not verl's (the packed budget checks,
which would see it, need ``response_only``, which verl does not have).
Ranks handing different row counts are refused before the gather (verl's
engine makes its rows itself, so no input of verl's can differ so).

CP layouts: the harness's ``zigzag`` is verl's ``cp_layout="zigzag"``; its
``allgather`` (contiguous pieces of the stream) is verl's ``"contiguous"``
where ``preprocess_thd_engine`` takes ``cp_layout``.
"""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist

from harness.targets.upstream import megatron_stand_in, packing
from harness.targets.upstream.shared_gradient import SumGradientOverGroup

VERL_LAYOUTS = {"none": "zigzag", "zigzag": "zigzag", "allgather": "contiguous"}


def has_layout_argument(util) -> bool:
    """verl's ``preprocess_thd_engine`` takes ``cp_layout`` (else: zigzag only)."""
    return "cp_layout" in inspect.signature(util.preprocess_thd_engine).parameters


class _AllRanks(torch.autograd.Function):
    """All CP ranks' rows, concatenated; backward: the gradient summed over the group, this rank's rows of it."""

    @staticmethod
    def forward(ctx, local, group):
        ctx.group, ctx.rank, ctx.rows = group, dist.get_rank(group), local.shape[0]
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, local.contiguous(), group=group)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows], None


def _problem(inputs, logits, cp: int) -> str:
    """What this rank's inputs describe that cannot be presented to verl ("" if nothing)."""
    for i, (tokens, total, response, mask) in enumerate(
        zip(inputs.tokens, inputs.total_lengths, inputs.response_lengths, inputs.loss_masks)
    ):
        if tokens.numel() != total:
            return f"tokens[{i}] has {tokens.numel()} ids, total_lengths says {total}"
        if not 0 <= response <= total - 1:
            return f"response_lengths[{i}]={response} must lie in [0, total_lengths[{i}] - 1 = {total - 1}]"
        if mask.numel() != response:
            return f"loss_masks[{i}] has {mask.numel()} entries, response_lengths says {response}"
    if inputs.cp_mode == "allgather":
        needed = -(-sum(inputs.total_lengths) // cp)
    else:
        needed = sum(packing.padded_lengths(inputs, cp)) // cp
    if logits.shape[0] < needed:
        return f"logits rows: {logits.shape[0]} on this rank, the packed layout needs at least {needed}"
    return ""


def checked(inputs, logits, cp_group) -> None:
    """Refuse what the adapter cannot present to verl, clearly and on every CP rank alike.

    These are the harness's descriptions, which verl never receives: its
    engine makes the logits rows itself (so their count, width and dtype agree
    on every CP rank) and returns whole sequences (no response lengths or loss
    masks). What verl does take (token ids, temperature, chunk size, the
    entropy flag, the CP layout) is left to verl. Under CP the ranks exchange
    their findings first, so a refusal is never one rank's alone (a hang).
    """
    cp = packing.cp_size_and_rank(cp_group)[0]
    problem = _problem(inputs, logits, cp)
    if cp == 1:
        if problem:
            raise ValueError(problem)
        return
    lengths = tuple(int(t) for t in inputs.total_lengths), tuple(int(r) for r in inputs.response_lengths)
    mine = (logits.shape[0], logits.shape[-1], str(logits.dtype), *lengths)
    everyone = [None] * cp
    dist.all_gather_object(everyone, (problem, mine), group=cp_group)
    for rank, (found, _) in enumerate(everyone):
        if found:
            raise ValueError(f"CP rank {rank}: {found}")
    if len({each[1][3] for each in everyone}) != 1:
        return  # the sequence lengths verl itself takes differ: what verl does with them is the check's question
    for what, index in (("logits rows", 0), ("V_local", 1), ("logits dtype", 2), ("response_lengths", 4)):
        if len({each[1][index] for each in everyone}) != 1:
            raise ValueError(f"{what} differ between CP ranks ({[each[1][index] for each in everyone]})")


def harness_rows(inputs, cp: int, local_rows: int) -> list[list[int]]:
    """Per sample, the row of each position ``0..T_i-1`` in the harness's stream, CP ranks' rows concatenated."""
    rows, offset = [], 0
    for total, padded in zip(inputs.total_lengths, packing.padded_lengths(inputs, cp)):
        if cp == 1 or inputs.cp_mode == "allgather":
            rows.append(list(range(offset, offset + total)))
            offset += total
            continue
        chunk = padded // (2 * cp)
        sample = []
        for p in range(total):
            k, within = divmod(p, chunk)
            owner, local = (k, within) if k < cp else (2 * cp - 1 - k, chunk + within)
            sample.append(owner * local_rows + offset + local)
        rows.append(sample)
        offset += 2 * chunk
    return rows


def _nested(values: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(values, layout=torch.jagged)


def _verl_stream(logits, wanted, cp_group, cp) -> torch.Tensor:
    """The rows verl's split puts on this rank (``wanted``: row numbers in the ranks' concatenation, -1 padding)."""
    if cp > 1:
        logits = _AllRanks.apply(logits, cp_group)
    if wanted.numel() <= logits.shape[0] and torch.equal(wanted, torch.arange(wanted.numel(), device=wanted.device)):
        return logits[: wanted.numel()]
    with_zero_row = torch.cat([logits, logits.new_zeros(1, logits.shape[-1])])
    return with_zero_row.index_select(0, torch.where(wanted < 0, logits.shape[0], wanted))


def _sequences(util, process, logits, inputs, *, tp_group, cp_group, temperature):
    """Steps 1-4: per output of ``process``, verl's gathered sequences ``[T_i]`` (None for a None output)."""
    checked(inputs, logits, cp_group)
    megatron_stand_in.set_groups(tp_group, cp_group)
    cp = packing.cp_size_and_rank(cp_group)[0]
    layout = {"cp_layout": VERL_LAYOUTS[inputs.cp_mode]} if has_layout_argument(util) else {}
    device = logits.device
    positions = harness_rows(inputs, cp, logits.shape[0])
    row_ids = _nested([torch.tensor(rows, dtype=torch.long, device=device) + 1 for rows in positions])
    verl_rows, params, _ = util.preprocess_thd_engine(row_ids, **layout)
    scores = _verl_stream(logits, verl_rows[0] - 1, cp_group, cp)
    tokens = _nested([t.to(device=device, dtype=torch.long) for t in inputs.tokens])
    labels = util.preprocess_thd_engine(tokens, need_roll=True, **layout)[0]
    temperatures = _nested([torch.full((int(t),), float(temperature), device=device) for t in inputs.total_lengths])
    per_row_temperature = util.preprocess_thd_engine(temperatures, **layout)[0]
    outputs = process(scores.unsqueeze(0), labels, per_row_temperature)
    batch = len(inputs.tokens)
    return tuple(
        None if out is None else list(util.postprocess_thd_engine(out, params, row_ids, batch, **layout).unbind())
        for out in outputs
    )


def _picked(sequences, positions) -> list[torch.Tensor]:
    return [
        sequence.index_select(0, torch.tensor(where, dtype=torch.long, device=sequence.device))
        for sequence, where in zip(sequences, positions)
    ]


def packed_outputs(util, process, logits, inputs, *, tp_group, cp_group, temperature, with_entropy):
    """verl's packed forward on the harness's rows: ``(log_probs_i, entropy_i or None)``, this rank's zigzag views.

    ``process(scores [1, T_local, V_local], labels [1, T_local], temperature [1, T_local])``
    is verl's logits processor, returning ``(log_probs, entropy or None)`` per row.
    """
    if not inputs.tokens:
        return [], ([] if with_entropy else None)
    cp, cp_rank = packing.cp_size_and_rank(cp_group)
    outputs = _sequences(util, process, logits, inputs, tp_group=tp_group, cp_group=cp_group, temperature=temperature)
    views = packing.view_positions(inputs, cp, cp_rank)
    return tuple(None if out is None else _views(out, views, cp_group) for out in outputs)


def _views(sequences, views, cp_group) -> list[torch.Tensor]:
    """Each sample's positions of this rank's zigzag view, the gradient shared over CP (module docstring)."""
    flat = torch.cat(sequences)
    if cp_group is not None and flat.requires_grad:
        flat = SumGradientOverGroup.apply(flat, cp_group)
    return _picked(list(flat.split([s.shape[0] for s in sequences])), views)


def whole_responses(util, process, logits, inputs, *, tp_group, cp_group, temperature):
    """verl's gathered outputs, each sample's WHOLE response ``[R_i]`` on every CP rank (its own rows' gradient only).

    What verl's loss reads under CP: every rank holds the whole batch.
    """
    outputs = _sequences(util, process, logits, inputs, tp_group=tp_group, cp_group=cp_group, temperature=temperature)
    responses = packing.view_positions(inputs, 1, 0)
    return tuple(None if out is None else _picked(out, responses) for out in outputs)


def whole_from_views(views: list[torch.Tensor], inputs, cp_group, name: str) -> list[torch.Tensor]:
    """Per-sample vectors given as each CP rank's zigzag view (advantages, old log-probs), made whole on every rank.

    Every rank sees every rank's views, so a view of the wrong length is refused on all of them alike.
    """
    cp = packing.cp_size_and_rank(cp_group)[0]
    everyone = [None] * cp
    dist.all_gather_object(everyone, [v.detach().cpu() for v in views], group=cp_group)
    whole = []
    for i, (total, response) in enumerate(zip(inputs.total_lengths, inputs.response_lengths)):
        first = total - response - 1
        values = torch.zeros(response, dtype=views[i].dtype)
        for rank in range(cp):
            positions = torch.tensor(packing.view_positions(inputs, cp, rank)[i], dtype=torch.long)
            if len(everyone[rank]) != len(views) or everyone[rank][i].numel() != positions.numel():
                raise ValueError(f"{name}: CP rank {rank}'s views do not match its zigzag view of the samples")
            values[positions - first] = everyone[rank][i]
        whole.append(values.to(views[i].device))
    return whole


def view_of_whole(whole: list[torch.Tensor], inputs, cp: int, cp_rank: int) -> list[torch.Tensor]:
    """This rank's zigzag view of per-sample whole responses (the inverse of ``whole_from_views``)."""
    first = [total - response - 1 for total, response in zip(inputs.total_lengths, inputs.response_lengths)]
    views = packing.view_positions(inputs, cp, cp_rank)
    return _picked(whole, [[p - f for p in where] for where, f in zip(views, first)])
