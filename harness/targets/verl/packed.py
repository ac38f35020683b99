"""verl's packed (thd) level: the harness's rows presented as the model verl's engine forward calls.

What runs is verl's own composition, ``gptmodel_forward_model_engine``
(``verl/models/mcore/model_forward.py``): ``preprocess_thd_engine`` packs the
batch (each sequence padded to a multiple of ``tp·cp·2`` zigzag, ``tp·cp``
contiguous) and splits it over CP, the model runs on this rank's rows, each
logits-processor argument goes through ``preprocess_thd_engine`` again (the
label with the roll verl decides), the logits processor runs, and
``postprocess_thd_engine`` all-gathers each output over CP (other ranks' rows
detached) and cuts it back into sequences: position ``p`` holds the value of
token ``p + 1``. This module is the model and the reading of what comes back:

* the model (``RowsModel``): the harness's rows (docs/math.md: per-sample
  padding to ``2·cp`` under zigzag, none under allgather or without CP) are
  not verl's, so the engine's ``input_ids`` are each position's ROW NUMBER
  (+1) in the CP ranks' concatenated rows (``harness_rows``); verl's own split
  of them tells each rank's model which rows it returns (verl's padding, 0, a
  zero row). Under CP every rank gathers all ranks' logits rows first
  (gradient summed back to the owner). The model returns a tensor of its own
  (a model's output, which verl's processor divides in place);
* out: each rank holds every position's value (verl's gather) but the gradient
  only of its own rows, as every verl rank computes the same loss over the
  gathered batch; the harness gives each rank the gradient of its zigzag view
  only, so the gathered values pass through ``SumGradientOverGroup``, whose
  backward sums the views' gradients over the CP group (what every verl rank's
  identical loss would give).

Under CP the gather holds ``cp`` times a rank's logits: the adapter's cost,
not verl's. Ranks handing different row counts are refused before the gather
(verl's engine makes its rows itself, so no input of verl's can differ so).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.targets.upstream import packing
from harness.targets.upstream.calls import size_and_rank
from harness.targets.upstream.shared_gradient import SumGradientOverGroup

VERL_LAYOUTS = {"none": "zigzag", "zigzag": "zigzag", "allgather": "contiguous"}


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
    cp = size_and_rank(cp_group)[0]
    if (cp > 1) != (inputs.cp_mode != "none"):
        raise ValueError(f"cp_mode={inputs.cp_mode!r} does not match the cp_group given ({cp} rank(s))")
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


def nested(values: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(values, layout=torch.jagged)


def row_ids(inputs, cp: int, local_rows: int, device) -> torch.Tensor:
    """The engine's ``input_ids``: per sample, each position's row number + 1 (verl pads with 0)."""
    rows = harness_rows(inputs, cp, local_rows)
    return nested([torch.tensor(r, dtype=torch.long, device=device) + 1 for r in rows])


class RowsModel:
    """The model verl's engine forward calls: the harness's logits rows its ``input_ids`` name (module docstring).

    Megatron's ``GPTModel`` attributes the engine reads (``pre_process``, ``post_process``, ``config.fp8``) are a
    single-stage model in full precision.
    """

    pre_process = post_process = True

    class config:  # noqa: N801  (Megatron's TransformerConfig, as the engine reads it)
        fp8 = None

    def __init__(self, logits: torch.Tensor, cp_group):
        self.logits, self.cp_group = logits, cp_group

    def __call__(self, input_ids, attention_mask=None, position_ids=None, packed_seq_params=None, **unexpected):
        if unexpected or attention_mask is not None:
            what = sorted(unexpected) or ["attention_mask"]
            raise ValueError(f"the harness's model takes no {what}: a new input of verl's engine, to map")
        logits = self.logits if self.cp_group is None else _AllRanks.apply(self.logits, self.cp_group)
        wanted = input_ids.reshape(-1)
        if bool((wanted > 0).all()):
            return logits.index_select(0, wanted - 1).unsqueeze(0)  # [1, T_local, V_local], the model's own tensor
        with_zero_row = torch.cat([logits, logits.new_zeros(1, logits.shape[-1])])
        return with_zero_row.index_select(0, torch.where(wanted > 0, wanted - 1, logits.shape[0])).unsqueeze(0)


def picked(sequences, positions) -> list[torch.Tensor]:
    return [
        sequence.index_select(0, torch.tensor(where, dtype=torch.long, device=sequence.device))
        for sequence, where in zip(sequences, positions)
    ]


def views(sequences, positions, cp_group) -> list[torch.Tensor]:
    """Each sample's positions of this rank's zigzag view, the gradient shared over CP (module docstring)."""
    flat = torch.cat(sequences)
    if cp_group is not None and flat.requires_grad:
        flat = SumGradientOverGroup.apply(flat, cp_group)
    return picked(list(flat.split([s.shape[0] for s in sequences])), positions)


def whole_from_views(views: list[torch.Tensor], inputs, cp_group, name: str) -> list[torch.Tensor]:
    """Per-sample vectors given as each CP rank's zigzag view (advantages, old log-probs), made whole on every rank.

    Every rank sees every rank's views, so a view of the wrong length is refused on all of them alike.
    """
    cp = size_and_rank(cp_group)[0]
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
