"""The sampling adapters' seams, on stand-in checkouts written here (no network, no upstream checkout).

``tests/fakes/nemo_rl/sampling`` follows the signatures of NeMo-RL's
``*WithSampling`` Functions with correct arithmetic; ``sampling_per_shard`` is
the same with ``K`` derived per TP shard (the named hazard of
``regressions/test_sampling_per_shard.py``). The adapter must map the
harness's shard, row padding to a multiple of TP and chunk rounding so the
correct stand-in passes the derived-``K`` check at TP 1 and 2, and the check
must fail the per-shard one; what NeMo-RL lacks reads UNSUPPORTED.
"""

import pytest

from harness.cases.case import Case
from harness.cases.sampling import sampling_case
from harness.checks.sampling import check_sampling
from harness.targets import load_target
from tests.fakes.nemo_rl import targets as stand_ins

CORRECT = f"{stand_ins.__file__}:sampling"
PER_SHARD = f"{stand_ins.__file__}:sampling_per_shard"
# 7 rows: not a multiple of TP 2 (the adapter pads); chunk 3 is rounded up to 4 at TP 2
CASES = [
    sampling_case(
        Case(seed=31, vocab=12, samples=((8, 4),), with_entropy=False), kept="derived", form="derived", top_k=3
    ),
    sampling_case(
        Case(seed=32, vocab=16, tp=2, samples=((7, 5),), chunk_size=3, with_entropy=False),
        kept="derived",
        form="derived",
        top_k=4,
        top_p=0.8,
    ),
]


def test_declares_what_nemo_rl_has():
    capabilities = load_target(CORRECT).capabilities
    assert {"sampling", "sampling_derived", "sampling_neg_inf"} <= capabilities
    assert not {"sampling_csr", "sampling_dense", "sampling_entropy", "sampling_min_p"} & capabilities


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}")
def test_correct_stand_in_passes(case):
    check_sampling(case, CORRECT)


def test_per_shard_stand_in_fails():
    with pytest.raises(AssertionError, match="log_probs over K"):
        check_sampling(CASES[1], PER_SHARD)


def test_given_kept_set_is_unsupported():
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED"):
        check_sampling(sampling_case(CASES[0], kept="random", form="csr"), CORRECT)
