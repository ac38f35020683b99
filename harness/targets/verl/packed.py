"""verl's packed (thd) level: the harness's rows presented as the model verl's engine forward calls.

Its ``input_ids`` are each position's ROW NUMBER + 1 in the CP ranks' concatenated rows, so verl's own pack and CP
split tell each rank's model which rows it returns (verl's padding, 0: a zero row). verl's loss is the gathered
batch's on every rank; the harness gives each rank its zigzag view's gradient (``SumGradientOverGroup``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from harness.targets.upstream import packing
from harness.targets.upstream.calls import size_and_rank
from harness.targets.upstream.shared_gradient import SumGradientOverGroup

VERL_LAYOUTS = {"none": "zigzag", "zigzag": "zigzag", "allgather": "contiguous"}


def _problem(inputs, logits, cp: int) -> str:
    for i, (tokens, total, response, mask) in enumerate(
        zip(inputs.tokens, inputs.total_lengths, inputs.response_lengths, inputs.loss_masks)
    ):
        if tokens.numel() != total:
            return f"tokens[{i}] has {tokens.numel()} ids, total_lengths says {total}"
        if not 0 <= response <= total - 1:
            return f"response_lengths[{i}]={response} must lie in [0, total_lengths[{i}] - 1 = {total - 1}]"
        if mask.numel() != response:
            return f"loss_masks[{i}] has {mask.numel()} entries, response_lengths says {response}"
    stream = sum(inputs.total_lengths if inputs.cp_mode == "allgather" else packing.padded_lengths(inputs, cp))
    needed = -(-stream // cp)
    if logits.shape[0] < needed:
        return f"logits rows: {logits.shape[0]} on this rank, the packed layout needs at least {needed}"
    return ""


def checked(inputs, logits, cp_group) -> None:
    """Refuse what the adapter cannot present to verl, on every CP rank alike (one rank's refusal alone: a hang):
    only the harness's descriptions, which verl never receives; what verl takes is left to verl."""
    cp = size_and_rank(cp_group)[0]
    if (cp > 1) != (inputs.cp_mode != "none"):
        raise ValueError(f"cp_mode={inputs.cp_mode!r} does not match the cp_group given ({cp} rank(s))")
    problem = _problem(inputs, logits, cp)
    if cp == 1:
        if problem:
            raise ValueError(problem)
        return
    lengths = tuple(int(t) for t in inputs.total_lengths), tuple(int(r) for r in inputs.response_lengths)
    everyone = [None] * cp
    dist.all_gather_object(
        everyone, (problem, (logits.shape[0], logits.shape[-1], str(logits.dtype), *lengths)), group=cp_group
    )
    for rank, (found, _) in enumerate(everyone):
        if found:
            raise ValueError(f"CP rank {rank}: {found}")
    if len({each[1][3] for each in everyone}) != 1:
        return  # the sequence lengths verl itself takes differ: what verl does with them is the check's question
    for what, index in (("logits rows", 0), ("V_local", 1), ("logits dtype", 2), ("response_lengths", 4)):
        if len({each[1][index] for each in everyone}) != 1:
            raise ValueError(f"{what} differ between CP ranks ({[each[1][index] for each in everyone]})")


def row_ids(inputs, cp: int, local_rows: int, device) -> torch.Tensor:
    """The engine's ``input_ids``: per sample, each position's row + 1 in the CP ranks' concatenated rows."""
    rows, offset = [], 0
    for total, padded in zip(inputs.total_lengths, packing.padded_lengths(inputs, cp)):
        positions = torch.arange(total, dtype=torch.long, device=device)
        if cp == 1 or inputs.cp_mode == "allgather":
            rows.append(offset + positions)
            offset += total
            continue
        chunk = padded // (2 * cp)  # zigzag: chunk k of the sequence on rank k, or 2cp-1-k behind that rank's first
        k, within = positions // chunk, positions % chunk
        late = k >= cp
        rows.append(
            torch.where(late, 2 * cp - 1 - k, k) * local_rows + offset + torch.where(late, chunk + within, within)
        )
        offset += 2 * chunk
    return nested([r + 1 for r in rows])


def nested(values: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(values, layout=torch.jagged)


class RowsModel:
    """A single-stage Megatron ``GPTModel`` in full precision: the rows ``input_ids`` name, as a tensor of its own
    (verl's processor divides it in place). Under CP it gathers ``cp`` times a rank's logits (the adapter's cost)."""

    pre_process = post_process = True

    class config:  # noqa: N801  (Megatron's TransformerConfig, as the engine reads it)
        fp8 = None

    def __init__(self, logits: torch.Tensor, cp_group):
        self.logits, self.cp_group = logits, cp_group

    def __call__(self, input_ids, attention_mask=None, position_ids=None, packed_seq_params=None, **unexpected):
        if unexpected or attention_mask is not None:
            what = sorted(unexpected) or ["attention_mask"]
            raise ValueError(f"the harness's model takes no {what}: a new input of verl's engine, to map")
        logits = self.logits
        if self.cp_group is not None:  # all CP ranks' rows; backward: the group's summed gradient, this rank's rows
            parts = [torch.empty_like(logits) for _ in range(dist.get_world_size(self.cp_group))]
            dist.all_gather(parts, logits.detach().contiguous(), group=self.cp_group)
            parts[dist.get_rank(self.cp_group)] = logits
            logits = SumGradientOverGroup.apply(torch.cat(parts), self.cp_group)
        wanted = input_ids.reshape(-1)
        if bool((wanted > 0).all()):
            return logits.index_select(0, wanted - 1).unsqueeze(0)  # [1, T_local, V_local], the model's own tensor
        with_zero_row = torch.cat([logits, logits.new_zeros(1, logits.shape[-1])])
        return with_zero_row.index_select(0, torch.where(wanted > 0, wanted - 1, logits.shape[0])).unsqueeze(0)


def views(out: dict, call, cp_group) -> tuple:
    """The log-probs (and entropy, if asked) at each sample's positions of this rank's zigzag view, the gradient
    summed over ``cp_group`` (module docstring)."""
    positions, picked = packing.view_positions(call.inputs, *call.cp), {}
    for key in ("log_probs", "entropy") if call.with_entropy else ("log_probs",):
        sequences = out[key].unbind()
        flat = torch.cat(sequences)
        if cp_group is not None and flat.requires_grad:
            flat = SumGradientOverGroup.apply(flat, cp_group)
        picked[key] = [
            s.index_select(0, torch.tensor(p, dtype=torch.long, device=s.device))
            for s, p in zip(flat.split([s.shape[0] for s in sequences]), positions)
        ]
    return picked["log_probs"], picked.get("entropy")


def whole_from_views(views: list[torch.Tensor], inputs, cp_group, name: str) -> list[torch.Tensor]:
    """Per-sample vectors given as each CP rank's zigzag view (advantages, old log-probs), made whole on every rank
    (which sees every rank's views, so a view of the wrong length is refused on all alike)."""
    cp = size_and_rank(cp_group)[0]
    everyone = [None] * cp
    dist.all_gather_object(everyone, [v.detach().cpu() for v in views], group=cp_group)
    whole = []
    for i, (total, response) in enumerate(zip(inputs.total_lengths, inputs.response_lengths)):
        values = torch.zeros(response, dtype=views[i].dtype)
        for rank in range(cp):
            positions = torch.tensor(packing.view_positions(inputs, cp, rank)[i], dtype=torch.long)
            if len(everyone[rank]) != len(views) or everyone[rank][i].numel() != positions.numel():
                raise ValueError(f"{name}: CP rank {rank}'s views do not match its zigzag view of the samples")
            values[positions - (total - response - 1)] = everyone[rank][i]
        whole.append(values.to(views[i].device))
    return whole
