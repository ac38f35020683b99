"""The SkyRL family's hidden-state entry point, on the stand-in packages (no network, no SkyRL, no Triton).

``tests/fakes/skyrl_fixed`` has a ``FusedLinearChunkedDistributedLogprob``
with upstream's signature and plain-autograd arithmetic that, like upstream,
returns this rank's partial ``grad(hidden)``; ``skyrl_buggy``'s builds
``one_hot(target, V_local)`` in its backward (docs/bugs.md #3). The adapter must
load them by path, map shapes, shard bounds and chunking (never the temperature: ``Entry.lacks``), and
sum ``grad(hidden)`` over TP (the trainer's sequence-parallel seam) so the
fixed one passes parity at one and two TP ranks; the one_hot regression's
hidden-path case must fail the buggy one only.
"""

import dataclasses

import pytest
import torch

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.checks.hidden import (
    check_hidden_backward,
    check_hidden_chunk_invariance,
    check_hidden_forward,
    check_hidden_tp_consistency,
)
from harness.checks.parity import require
from harness.memory.hidden import REAL_SCALES, measure_hidden_memory, target_runner
from harness.memory.tracker import int64_with_dimension
from harness.targets import load_target

STAND_INS = "tests/fakes/skyrl_targets.py"
FIXED, BUGGY = f"{STAND_INS}:FixedHidden", f"{STAND_INS}:BuggyHidden"
CASES = [
    with_hidden_size(Case(seed=1, vocab=12, samples=((9, 4), (5, 2)), chunk_size=4, with_entropy=False), 6),
    with_hidden_size(Case(seed=2, vocab=16, tp=2, samples=((11, 5),), chunk_size=3, with_entropy=False), 5),
    with_hidden_size(Case(seed=3, vocab=10, tp=2, samples=((7, 3),), dtype="bfloat16", with_entropy=False), 4),
]


def test_the_family_declares_the_path_and_what_it_lacks():
    """The hidden-state path is the family's own entry point; what it lacks that the token path has (entropy; the
    temperature, whose division of the head only the label-rolling composition performs: the adapter never does
    it) reads UNSUPPORTED for its checks alone."""
    target = load_target(FIXED)
    assert {"hidden", "hidden_tp", "chunking", "temperature", "entropy"} <= target.capabilities
    lacked = {"entropy", "entropy_gate", "temperature"}
    assert target.capabilities_for({"hidden", "chunking"}) == target.capabilities - lacked
    assert target.capabilities_for({"token", "entropy"}) == target.capabilities
    for capability in ("entropy", "temperature"):
        with pytest.raises(pytest.skip.Exception, match=f"UNSUPPORTED.*{capability}"):
            require(FIXED, {"hidden", capability})
    require(FIXED, {"token", "entropy", "temperature"})


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}-{c.dtype}")
def test_fixed_stand_in_passes_parity(case):
    check_hidden_forward(case, FIXED)
    check_hidden_backward(case, FIXED)


def test_grad_hidden_is_summed_over_tp():
    """The stand-in returns a rank's partial g_r @ W_r: without the adapter's TP sum the ranks would differ."""
    check_hidden_tp_consistency(CASES[1], FIXED)


def test_chunk_at_or_above_the_row_count_is_one_chunk():
    case = CASES[0].with_(chunk_size=CASES[0].rows)
    check_hidden_forward(case, FIXED)
    check_hidden_chunk_invariance(case, FIXED)


@pytest.mark.parametrize("spec, expect_one_hot", [(FIXED, False), (BUGGY, True)], ids=("fixed", "one_hot"))
def test_one_hot_regression_case_fails_the_buggy_stand_in_only(spec, expect_one_hot):
    """The one_hot regression's hidden-path case (T=205,280, H=4096, V_local=18,992, chunk 1024, fake tensors)."""
    case = dataclasses.replace(REAL_SCALES["qwen-tp8-fp32"], with_entropy=False)
    report = measure_hidden_memory(case, target_runner(load_target(spec), case))
    one_hots = int64_with_dimension(report.allocations, case.vocab_local)
    assert bool(one_hots) == expect_one_hot, str(report)
    if expect_one_hot:
        assert {a.shape for a in one_hots} >= {(1, 1024, case.vocab_local)}


def test_entropy_is_refused_not_faked():
    with pytest.raises(ValueError, match="no-grad metric"):
        load_target(FIXED).hidden_log_probs(
            torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(2, dtype=torch.long), tp_group=None, chunk_size=None,
            with_entropy=True, entropy_grad=False, temperature=1.0,
        )  # fmt: skip
