"""verl's engine forward and ``ppo_loss`` on the harness's batch: the model's ``input_ids`` are each position's ROW
+ 1 in the CP ranks' concatenated rows (0, verl's padding: a zero row), so verl's own pack and CP split pick them.
"""

from __future__ import annotations

import math
import types

import torch
import torch.distributed as dist

from harness.targets.protocol import PolicyOptions
from harness.targets.upstream import packing
from harness.targets.upstream.calls import size_and_rank
from harness.targets.upstream.family import accepts
from harness.targets.upstream.settings import StrictSettings
from harness.targets.upstream.shared_gradient import SumGradientOverGroup
from harness.targets.verl import padding as verl_padding

VERL_LAYOUTS = {"none": "zigzag", "zigzag": "zigzag", "allgather": "contiguous"}
LOSS_MODES = {"ppo": "vanilla", "gspo": "gspo", "cispo": "cispo"}
KL_KINDS = ("k1", "k2", "abs", "low_var_kl")  # verl's kl_loss_type names, the harness's too
_VERLS = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# the harness's mode -> verl's loss_agg_mode (sum-of-sample-mean: with global_batch_size = 1, or before agg_loss took
# it, the micro-batch's sample mean times B: ``loss``)
AGGREGATIONS = {"sum-of-sample-mean": "seq-mean-token-mean", **dict(zip(_VERLS, _VERLS))}
NO_FLOOR = 5e-324  # IcePop's lower bound must be positive: below every weight exp(x) of a finite x > -744


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
    """Refuse the harness's descriptions verl never receives, on every CP rank alike (one refusing alone: a hang)."""
    cp = size_and_rank(cp_group)[0]
    if (cp > 1) != (inputs.cp_mode != "none"):
        raise ValueError(f"cp_mode={inputs.cp_mode!r} does not match the cp_group given ({cp} rank(s))")
    problem = _problem(inputs, logits, cp)
    if cp == 1 and problem:
        raise ValueError(problem)
    lengths = tuple(int(t) for t in inputs.total_lengths), tuple(int(r) for r in inputs.response_lengths)
    everyone = [(problem, (logits.shape[0], logits.shape[-1], str(logits.dtype), *lengths))]
    if cp > 1:
        mine, everyone = everyone[0], [None] * cp
        dist.all_gather_object(everyone, mine, group=cp_group)
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
        rank = torch.where(late, 2 * cp - 1 - k, k)
        rows.append(rank * local_rows + offset + torch.where(late, chunk + within, within))
        offset += 2 * chunk
    return torch.nested.as_nested_tensor([r + 1 for r in rows], layout=torch.jagged)


def response_positions(inputs, device) -> torch.Tensor:
    """Per sample, nested: True at the positions whose next token is a response token (forward_step's loss mask)."""
    masks = []
    for total, response in zip(inputs.total_lengths, inputs.response_lengths):
        mask = torch.zeros(total, dtype=torch.bool, device=device)
        mask[total - response - 1 : total - 1] = True
        masks.append(mask)
    return torch.nested.as_nested_tensor(masks, layout=torch.jagged)


class RowsModel:
    """A single-stage Megatron ``GPTModel`` in full precision: the rows ``input_ids`` name, as a tensor of its own
    (verl divides it in place). Under CP it gathers ``cp`` times a rank's logits (the adapter's cost)."""

    pre_process = post_process = True
    config = types.SimpleNamespace(fp8=None)  # Megatron's TransformerConfig, as the engine reads it

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
    """The log-probs (and entropy, if asked) of this rank's zigzag view, the gradient summed over ``cp_group``."""
    picked = []
    for key in ("log_probs", "entropy") if call.with_entropy else ("log_probs",):
        padded = out[key].to_padded_tensor(0.0)  # [B, the longest sequence]
        if cp_group is not None and padded.requires_grad:
            padded = SumGradientOverGroup.apply(padded, cp_group)
        picked.append(packing.per_sample_view(padded, call.inputs, *call.cp))
    return picked[0], picked[1] if call.with_entropy else None


def whole(views: list[torch.Tensor], inputs, cp_group, name: str) -> list[torch.Tensor]:
    """Each CP rank's zigzag views made whole on every rank (each sees all views: a wrong length is refused on all)."""
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


# ---- ppo_loss -----------------------------------------------------------------------------------
class ActorSettings(StrictSettings):
    """verl's ``ActorConfig``; ``get`` answers verl's own default for an unset key."""

    READ_AS = "verl actor config"
    MAPPED_IN = "harness/targets/verl/engine.py (loss)"

    def get(self, key, default=None):
        return self.__dict__.get(key, default)


DECLARED_BY = {  # each option: what declares it where present (the vanilla loss's dual clip: clip_ratio_c)
    **{
        f"policy_{kind}": accepts("get_policy_loss_fn", mode)
        for kind, mode in (("gspo", "gspo"), ("cispo", "cispo"), ("dual_clip", "vanilla"))
    },
    **{f"policy_kl_{kind}": accepts("kl_penalty", torch.zeros(1, 2), torch.zeros(1, 2), kind) for kind in KL_KINDS},
    **{f"policy_agg_{mode}": accepts("agg_loss", torch.zeros(1, 2), torch.ones(1, 2), mode) for mode in _VERLS[:-1]},
    # the norm mode where agg_loss takes its constant horizon (#4360, 2025-12; before, the mask's width)
    f"policy_agg_{_VERLS[-1]}": accepts(
        "agg_loss", torch.zeros(1, 2), torch.ones(1, 2), _VERLS[-1], loss_scale_factor=1
    ),
    # the trainer's compute_rollout_correction_weights (prepare loads it alone) makes the weights its loss reads:
    # truncation (TIS) from the helper's first revision (#3984); IcePop's "lower_upper" threshold (the harness's
    # MIS) only where the helper takes it (#5722), which the earlier helper compares with 0 and refuses
    **{f"policy_tis_{level}": "rollout_weights" for level in ("token", "sequence")},
    **dict.fromkeys(
        ("policy_mis_token", "policy_mis_sequence", "policy_mis_floor"),
        accepts("rollout_weights", torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), "token", "0.5_2.0"),
    ),
}


class Batch(dict):
    """The TensorDict ``ppo_loss`` reads, as it reads it: entries by key, ``get``, ``select``, ``to_padded_tensor``."""

    @property
    def batch(self):  # ppo_loss between #3401 and #3422 (2025-09) took a DataProto and read its ``batch``
        return self

    def select(self, *keys):
        return Batch({key: self[key] for key in keys})

    def to_padded_tensor(self):
        return Batch({k: v.to_padded_tensor(0.0) if v.is_nested else v for k, v in self.items()})


def loss(up, call, output: dict, lengths, mask):
    """verl's ``ppo_loss(config, output, data)``: ``output`` per position ``p`` of each sequence (token ``p + 1``),
    ``lengths`` each sequence's (total, response); ``mask`` and the call's per-sample vectors ``[B, R]``. ``data`` is
    the trainer's left-right batch (``padding.left_right``), turned into the no-padding form by verl's own
    ``left_right_2_no_padding`` where the revision has it, as the trainer does before every ppo_loss (#3600 on)."""
    old, options = call.old_log_probs, call.options if call.options is not None else PolicyOptions()
    device, response_mask = mask.device, mask.to(bool)
    data = {
        **verl_padding.left_right(lengths, device),  # the trainer's left-right padded batch
        "dp_size": 1,
        "batch_num_tokens": mask.sum(),
        "global_batch_size": 1 if options.aggregation == "sum-of-sample-mean" else len(lengths),
        "response_mask": response_mask,
        "old_log_probs": old,
        "advantages": call.advantages,
    }
    if options.rollout_correction is not None:  # IcePop (the harness's MIS) is "lower_upper"
        floor = options.rollout_floor if options.rollout_floor is not None else NO_FLOOR
        threshold = options.rollout_cap if options.rollout_correction == "tis" else f"{floor!r}_{options.rollout_cap!r}"
        data["rollout_is_weights"], _metrics = up.rollout_weights(
            log_ratio=old - options.rollout_log_probs.to(old),
            response_mask=response_mask,
            rollout_is=options.rollout_level,
            rollout_is_threshold=threshold,
        )
    if options.kl_coef != 0:
        data["ref_log_prob"] = options.ref_log_probs.to(old)
    config = ActorSettings(
        clip_ratio=call.eps_clip,
        clip_ratio_low=call.eps_clip,
        clip_ratio_high=call.clip_high,
        clip_ratio_c=math.inf if options.dual_clip_c is None else options.dual_clip_c,  # inf: a cap never reached
        loss_agg_mode=AGGREGATIONS[options.aggregation],
        policy_loss=ActorSettings(loss_mode=LOSS_MODES[options.kind]),
        loss_scale_factor=options.horizon if options.aggregation == "seq-mean-token-sum-norm" else None,
        global_batch_info={},
        entropy_coeff=call.entropy_coef,
        use_kl_loss=options.kl_coef != 0,
        kl_loss_type=options.kl_kind if options.kl_kind in KL_KINDS else None,
        kl_loss_coef=options.kl_coef,
        # the vanilla loss's own truncated IS (#2953 to #3694, 2025-08..10), read on every call: verl's default -1,
        # off (the harness's rollout corrections are the rollout_is_weights above, where the trainer makes them)
        tis_imp_ratio_cap=-1,
    )
    if up.left_right_2_no_padding is not None:  # the trainer's own step before ppo_loss (#3600 on)
        data = up.left_right_2_no_padding(Batch(data))
    loss = up.ppo_loss(config, output, Batch(data))[0]  # (the loss, its metrics)
    if options.aggregation == "sum-of-sample-mean" and not up.takes_batch_size:
        # Before #4211 (2025-11) agg_loss takes no global_batch_size: seq-mean-token-mean is the mean over the
        # micro-batch's samples, and the protocol's sum-of-sample-mean that mean times B (calls.per_batch, TRL's).
        loss = loss * len(lengths)
    return loss


# whether agg_loss takes the batch's size (#4211 on), which makes global_batch_size = 1 the sum of sample means
TAKES_BATCH_SIZE = accepts("agg_loss", torch.zeros(1, 2), torch.ones(1, 2), "seq-mean-token-mean", global_batch_size=1)
