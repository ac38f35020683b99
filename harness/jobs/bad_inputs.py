"""Rank-side jobs of the distributed bad-input table (properties/test_bad_inputs_distributed.py).

The inputs that hurt most in a trainer need ranks: CP ranks that disagree
(slice lengths, batch metadata, options), a CP group with no CP mode, a TP
group whose ranks hold different vocabulary shards (a hang, where one clear error was owed). Each row
perturbs what SOME ranks pass, so every rank's own input is valid on its
own, and calls the target on every rank. The job CATCHES the target's
exception and returns its type and text per rank, so the parent can require
a clear error on EVERY rank; a rank that hangs instead is the pool's
``RankHang`` (or ``CollectiveHang``: the backend's collective timeout is
never caught as the row's error), and a rank that returns values instead of raising is a silent
wrong answer: both fail the row.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from harness.cases.case import Case
from harness.jobs.logits import in_view, on_host, packed_inputs
from harness.ranks.device import to_device
from harness.ranks.errors import is_collective_timeout
from harness.targets import load_target


def _logits(case: Case, ctx, *, drop_rows: int = 0, drop_columns: int = 0):
    logits = case.rank_logits(ctx.tp_rank, ctx.cp_rank)
    logits = logits[: logits.shape[0] - drop_rows, : logits.shape[1] - drop_columns]
    return to_device(logits.contiguous()).requires_grad_()


def asks_entropy(target) -> bool:
    """A row asks for the entropy where the target returns one: a request for what a target does not declare is
    refused as such (the family kernel's boundary), before the bad input the row is about could reach it."""
    return "entropy" in target.capabilities


def _packed(target, case: Case, ctx, *, logits=None, inputs=None, cp_group="ctx", chunk_size=None):
    return target.packed_log_probs(
        _logits(case, ctx) if logits is None else logits,
        packed_inputs(case, on_device=True) if inputs is None else inputs,
        tp_group=ctx.tp_group,
        cp_group=ctx.cp_group if cp_group == "ctx" else cp_group,
        chunk_size=chunk_size,
        with_entropy=asks_entropy(target),
        entropy_grad=True,
        temperature=1.0,
        response_only=False,
        loss_mask_only=False,
    )


def _token(target, case: Case, ctx, *, logits=None):
    logits = _logits(case, ctx) if logits is None else logits
    return target.token_log_probs(
        logits,
        to_device(case.row_targets()),
        tp_group=ctx.tp_group,
        chunk_size=None,
        with_entropy=asks_entropy(target),
        entropy_grad=True,
        temperature=1.0,
    )


def _odd(ctx) -> bool:
    """The ranks whose input a row perturbs: the second rank of the group the row is about."""
    return ctx.rank % 2 == 1


def _swapped_samples(case: Case) -> Case:
    return case.with_(samples=tuple(reversed(case.samples)))


def _shorter_response(case: Case) -> Case:
    (total, response), *rest = case.samples
    return case.with_(samples=((total, response - 1), *rest))


def _policy(target, case: Case, ctx, *, short_advantages: bool):
    advantages = [to_device(a.float()) for a in in_view(case.advantages(), case, ctx)]
    if short_advantages:
        advantages[0] = advantages[0][:-1]
    old = [a.detach().clone().zero_() for a in in_view(case.advantages(), case, ctx)]
    return target.policy_loss(
        _logits(case, ctx),
        packed_inputs(case, on_device=True),
        advantages=advantages,
        old_log_probs=[to_device(o.float()) for o in old],
        eps_clip=0.2,
        eps_clip_high=0.2,
        entropy_coef=0.0,
        with_entropy=asks_entropy(target),
        tp_group=ctx.tp_group,
        cp_group=ctx.cp_group,
        chunk_size=None,
        temperature=1.0,
        response_only=False,
        loss_mask_only=False,
    )


# The per-call options of the packed and token entry points (harness/targets/protocol.py): the value every rank
# passes, then the value the perturbed rank passes instead. The table of rows is GENERATED from this list
# (``option_rows``), one row per option and group, so a new option gets its row by construction.
CALL_OPTIONS = {
    "chunk_size": (None, 2),
    "with_entropy": (True, False),
    "entropy_grad": (True, False),
    "temperature": (1.0, 0.7),
    "dtype": ("float32", "bfloat16"),
    "response_only": (False, True),
    "loss_mask_only": (False, True),
}
# The options token_log_probs takes; a TP row of another option runs the packed entry point at tp > 1, cp = 1.
TOKEN_OPTIONS = ("chunk_size", "with_entropy", "entropy_grad", "temperature", "dtype")
# Row names kept from the hand-written table (expectations/*.toml name them).
_ROW_NAMES = {"with_entropy": "entropy_flag"}


def option_row_name(group: str, option: str) -> str:
    return f"{group}_{_ROW_NAMES.get(option, option)}"


def _option_call(target, case: Case, ctx, *, group: str, option: str):
    """Every rank calls the target with the default options but ``option``, which the perturbed rank changes."""
    options = {name: agreed for name, (agreed, _) in CALL_OPTIONS.items()}
    options["with_entropy"] = asks_entropy(target)  # the with_entropy row itself needs "entropy"
    if option == "loss_mask_only":
        options["response_only"] = True  # loss_mask_only needs it: the ranks then differ in loss_mask_only only
    if _odd(ctx):
        options[option] = CALL_OPTIONS[option][1]
    logits = _logits(case.with_(dtype=options.pop("dtype")), ctx)
    response_only, loss_mask_only = options.pop("response_only"), options.pop("loss_mask_only")
    if group == "tp" and option in TOKEN_OPTIONS:
        return target.token_log_probs(logits, to_device(case.row_targets()), tp_group=ctx.tp_group, **options)
    return target.packed_log_probs(
        logits,
        packed_inputs(case, on_device=True),
        tp_group=ctx.tp_group,
        cp_group=ctx.cp_group,
        response_only=response_only,
        loss_mask_only=loss_mask_only,
        **options,
    )


def _option_rows() -> dict:
    rows = {}
    for option in CALL_OPTIONS:
        for group in ("cp", "tp"):
            rows[option_row_name(group, option)] = partial(_option_call, group=group, option=option)
    return rows


# row name -> what every rank runs: (target, case, ctx) -> anything (an exception is the expected outcome)
ROWS = {
    "cp_slice_lengths": lambda t, c, x: _packed(t, c, x, logits=_logits(c, x, drop_rows=1 if _odd(x) else 0)),
    "cp_total_lengths": lambda t, c, x: _packed(
        t, c, x, inputs=packed_inputs(_swapped_samples(c) if _odd(x) else c, on_device=True)
    ),
    "cp_response_lengths": lambda t, c, x: _packed(
        t, c, x, inputs=packed_inputs(_shorter_response(c) if _odd(x) else c, on_device=True)
    ),
    "cp_mode_differs": lambda t, c, x: _packed(
        t, c, x, inputs=replace(packed_inputs(c, on_device=True), cp_mode="zigzag" if _odd(x) else "allgather")
    ),
    "cp_group_without_cp_mode": lambda t, c, x: _packed(
        t, c, x, inputs=replace(packed_inputs(c, on_device=True), cp_mode="none")
    ),
    "cp_mode_without_cp_group": lambda t, c, x: _packed(t, c, x, cp_group=None),
    "cp_advantages_on_one_rank": lambda t, c, x: _policy(t, c, x, short_advantages=_odd(x)),
    "tp_vocab_shard_widths": lambda t, c, x: _token(t, c, x, logits=_logits(c, x, drop_columns=1 if _odd(x) else 0)),
    **_option_rows(),
}


@on_host
def bad_input_job(payload: dict, ctx) -> dict:
    """Run one row on this rank; return the error it raised (type and text) or that it raised none."""
    case = Case.from_json(payload["case"])
    target = load_target(payload["spec"])
    try:
        ROWS[payload["row"]](target, case, ctx)
    except Exception as exc:  # the row's expected outcome: reported, judged by the parent
        if is_collective_timeout(f"{type(exc).__name__}: {exc}"):
            # Not an error the target raised: the ranks waited in a collective their peers never joined (a hang).
            # Re-raised so the pool reports CollectiveHang and respawns; caught here, the next row would run on
            # process groups whose pairs gloo has already closed.
            raise
        return {"error_type": type(exc).__name__, "error": str(exc)}
    return {"error_type": None, "error": None}
