"""Bad input across ranks: a clear error on EVERY rank within seconds, never a hang or a wrong value on some.

The world-1 table (test_bad_inputs.py) cannot express the inputs that hurt
most in a trainer: CP ranks that disagree (slice lengths, batch metadata,
options such as the chunk size or the entropy flag), a CP group passed with
no CP mode (or a CP mode with no group), a TP group whose ranks hold
vocabulary shards of different widths, and a bad argument on ONE rank while
its peers are fine. Each row runs through the rank pool
(harness/jobs/bad_inputs.py perturbs some ranks' inputs) and requires that
every rank raised an error of the named type whose text names the argument;
a hang ends as RankHang under the job deadline, a rank that returned values
is a silent wrong answer. Each row is shown to fail on impl/ with its check
removed (mutants ``no_cp_agreement``, ``no_tp_agreement``,
``cp_group_without_mode_accepted``, ``cp_mode_without_group_accepted``).

``cp_group_without_cp_mode`` needs ``cp_mode_arg``: a target whose API
takes no CP layout argument (SkyRL, slime, NeMo-RL read it from the CP
group or Megatron's parallel state) cannot be told "this batch is unsplit",
so the row does not apply to it (UNSUPPORTED, not an upstream defect).

Every CP row but ``cp_mode_differs`` (which needs both layouts) runs on each
CP layout, allgather and zigzag: what a row checks (that the ranks agree)
does not depend on the layout, and a target with one CP layout only (SkyRL
and NeMo-RL have zigzag, no allgather) still gets the row.
"""

from dataclasses import dataclass, replace

import pytest

from harness.cases.case import Case
from harness.checks.failure import ACCEPTED, UNCLEAR, ensure
from harness.checks.parity import require
from harness.jobs.bad_inputs import CALL_OPTIONS, TOKEN_OPTIONS, bad_input_job, option_row_name
from harness.ranks.run import run_job

# Two samples, the first spanning both CP ranks' slices (8 + 4 tokens, 6 rows per rank).
CP_CASE = Case(seed=61, vocab=16, cp=2, cp_mode="allgather", samples=((8, 6), (4, 2)), pad_multiple=3)
TP_CASE = Case(seed=62, vocab=16, tp=2, samples=((5, 3), (4, 2)))


@dataclass(frozen=True)
class DistributedBadInput:
    row: str
    case: Case
    needs: frozenset
    mentions: str | tuple  # the error must name this (or one of these)
    error: str = "ValueError"


# What a target must declare to take each per-call option at its perturbed value.
OPTION_NEEDS = {
    "chunk_size": {"chunking"},
    "with_entropy": {"entropy"},
    "entropy_grad": {"entropy", "entropy_gate"},
    "temperature": {"temperature"},
    "dtype": set(),
    "response_only": {"response_only"},
    "loss_mask_only": {"response_only", "loss_mask_only"},
}
# Words the error may name instead of the option: a TP rank evaluating other rows is told which rows differ.
OPTION_MENTIONS = {("tp", "response_only"): "evaluated rows", ("tp", "loss_mask_only"): "evaluated rows"}
# (group, option) pairs that are not a disagreement by the contract, each with why; every other pair gets a row.
NOT_A_DISAGREEMENT = {
    ("cp", "response_only"): "under a CP group only response rows are ever evaluated (response_only is implied)",
}
# Mixed loss masks (a 0 in each sample), so loss-mask-only rows evaluate fewer rows than response-only ones.
TP_PACKED_CASE = TP_CASE.with_(mask_mode="mixed")


def option_rows() -> list:
    """One row per per-call option (harness/jobs/bad_inputs.py CALL_OPTIONS) and group: a new option gets its row."""
    missing = set(CALL_OPTIONS) ^ set(OPTION_NEEDS)
    assert not missing, f"CALL_OPTIONS and OPTION_NEEDS must list the same options; differ on {sorted(missing)}"
    rows = []
    for option in CALL_OPTIONS:
        for group in ("cp", "tp"):
            if (group, option) in NOT_A_DISAGREEMENT:
                continue
            if group == "cp":
                case, needs = CP_CASE, {"packed", "cp_allgather"}
            elif option in TOKEN_OPTIONS:
                case, needs = TP_CASE, {"token", "vocab_parallel"}
            else:
                case, needs = TP_PACKED_CASE, {"packed", "vocab_parallel"}
            mentions = (option, OPTION_MENTIONS[group, option]) if (group, option) in OPTION_MENTIONS else option
            needs = frozenset(needs | OPTION_NEEDS[option])
            rows.append(DistributedBadInput(option_row_name(group, option), case, needs, mentions))
    return rows


ROWS = [
    DistributedBadInput("cp_slice_lengths", CP_CASE, frozenset({"packed", "cp_allgather"}), "logits rows"),
    DistributedBadInput("cp_total_lengths", CP_CASE, frozenset({"packed", "cp_allgather"}), "total_lengths"),
    DistributedBadInput("cp_response_lengths", CP_CASE, frozenset({"packed", "cp_allgather"}), "response_lengths"),
    DistributedBadInput("cp_mode_differs", CP_CASE, frozenset({"packed", "cp_allgather", "cp_zigzag"}), "cp_mode"),
    DistributedBadInput(
        "cp_group_without_cp_mode", CP_CASE, frozenset({"packed", "cp_allgather", "cp_mode_arg"}), "cp_mode"
    ),
    DistributedBadInput("cp_mode_without_cp_group", CP_CASE, frozenset({"packed", "cp_allgather"}), "cp_group"),
    DistributedBadInput(
        "cp_advantages_on_one_rank", CP_CASE, frozenset({"policy_loss", "cp_allgather", "entropy"}), "advantages"
    ),
    DistributedBadInput("tp_vocab_shard_widths", TP_CASE, frozenset({"token", "vocab_parallel"}), "V_local"),
    *option_rows(),
]


def _on_zigzag(bad: DistributedBadInput) -> DistributedBadInput:
    """The same row on the zigzag layout (its id gets a ``-zigzag`` suffix; the allgather rows keep their ids)."""
    return replace(
        bad,
        row=f"{bad.row}-zigzag",
        case=bad.case.with_(cp_mode="zigzag"),
        needs=(bad.needs - {"cp_allgather"}) | {"cp_zigzag"},
    )


ROWS += [_on_zigzag(bad) for bad in ROWS if "cp_allgather" in bad.needs and bad.row != "cp_mode_differs"]


@pytest.mark.tier("hardening")
@pytest.mark.parametrize("bad", ROWS, ids=lambda bad: bad.row)
def test_every_rank_raises_a_clear_error(bad, spec):
    require(spec, bad.needs)
    results = run_job(bad_input_job, bad.case, spec, compare_traces=False, row=bad.row.removesuffix("-zigzag"))
    silent = [rank for rank, result in enumerate(results) if result["error"] is None]
    ensure(
        not silent, ACCEPTED, f"{bad.row}: rank(s) {silent} returned values instead of raising (a silent wrong answer)"
    )
    for rank, result in enumerate(results):
        wrong_type = f"{bad.row}, rank {rank}: {result['error_type']}: {result['error']}"
        ensure(result["error_type"] == bad.error, UNCLEAR, wrong_type)
        mentions = (bad.mentions,) if isinstance(bad.mentions, str) else bad.mentions
        ensure(
            any(word in result["error"] for word in mentions),
            UNCLEAR,
            f"{bad.row}, rank {rank}: the error must name {bad.mentions!r}; got: {result['error']}",
        )
