"""Sampling-distribution replay at packed level, with context parallelism (docs/sampling.md).

The processed log-probs and entropy of every response token of a packed
batch over its kept set ``K``, and every rank's gradient shard of the packed
probe loss, against ``oracles/sampling.py`` in float64 (the token-level
oracle on the response rows, ``harness.checks.sampling.packed_sampling_reference``):
TP 1/2 x CP 1/2 (zigzag and allgather), fp32 / bf16, thd and bshd, every kind
and form of ``K`` that ``harness.cases.sampling`` makes. Each CP rank is handed
the rows of ``K`` its logits hold (``KeptSet``), so a target that lays ``K``
onto the wrong rows, drops a CP rank's rows or lets a CP rank return values
while its peer raises fails here, where the token-level property (one rank's
rows, no CP) cannot see it.

Tiers: contract (finite logits; a target outside ``K`` under ``"error"`` must
raise on EVERY rank, the CP ranks holding none of those rows included);
hardening (a kept set not sliced per CP rank is a clear error on every rank).
"""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.cases.sampling import sampling_case, sampling_cases
from harness.cases.strategies import cases
from harness.checks.parity import require
from harness.checks.sampling import assert_every_rank_raised, check_sampling_packed
from harness.jobs.sampling import sampling_packed_job
from harness.ranks.run import run_job

BASE = Case(seed=5, vocab=16, samples=((9, 5), (6, 3), (8, 1)), chunk_size=2)
# (8, 1) under CP 2: the one response row lies in chunk 3, held by CP rank 0 alone
ONE_ROW = BASE.with_(samples=((8, 1),), cp=2, cp_mode="zigzag")


def _packed_cases():
    return cases(
        tp=st.sampled_from((1, 2)),
        cp_sizes=(1, 2),
        dtype=st.sampled_from(("float32", "bfloat16")),
        max_samples=3,
        max_length=16,
        max_vocab_local=48,
    )


def _packed(case: Case, **spec) -> Case:
    return sampling_case(case, packed=True, **spec)


@pytest.mark.tier("contract")
@given(case=sampling_cases(_packed_cases(), packed=True))
@example(case=_packed(ONE_ROW, kept="outside", on_outside="error"))
@example(case=_packed(ONE_ROW.with_(cp_mode="allgather"), kept="outside", on_outside="error"))
@example(case=_packed(BASE.with_(tp=2, cp=2, cp_mode="zigzag")))
@example(case=_packed(BASE.with_(tp=2, cp=2, cp_mode="allgather", pad_multiple=4), form="dense"))
@example(case=_packed(BASE.with_(cp=2, cp_mode="zigzag", dtype="bfloat16"), kept="one_shard"))
@example(
    case=_packed(
        BASE.with_(tp=2, cp=2, cp_mode="allgather", temperature=0.7),
        kept="derived",
        form="derived",
        top_k=3,
        top_p=0.8,
    )
)
@example(case=_packed(BASE.with_(tp=2, cp=2, cp_mode="zigzag"), kept="outside", on_outside="neg_inf"))
@example(case=_packed(BASE.with_(cp=2, cp_mode="allgather"), kept="outside", on_outside="force_keep", form="dense"))
@example(case=_packed(BASE.with_(qkv_format="bshd", tp=2), kept="derived", form="derived", min_p=0.1))
def test_sampling_packed_parity(case, spec):
    check_sampling_packed(case, spec)


@pytest.mark.tier("hardening")
@pytest.mark.parametrize("cp_mode", ("zigzag", "allgather"))
@pytest.mark.parametrize("tp", (1, 2))
def test_kept_set_not_sliced_per_cp_rank_is_a_clear_error_on_every_rank(cp_mode, tp, spec):
    """The whole batch's CSR on every CP rank: the rank holding no response row has a kept set of the
    wrong length and says so, and the rank holding all of them (its CSR is right) raises too, instead
    of returning values or waiting for its peer."""
    case = _packed(ONE_ROW.with_(cp_mode=cp_mode, tp=tp, with_entropy=False))
    require(spec, {"sampling", "sampling_packed", "sampling_csr", f"cp_{cp_mode}", "chunking"})
    results = run_job(sampling_packed_job, case, spec, compare_traces=False, unsliced=True)
    assert_every_rank_raised(results, ("kept_offsets",), "a kept set not sliced per CP rank")
