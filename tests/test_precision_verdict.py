"""No false contract red (harness/checks/tolerance.py PrecisionOnly, bit-exactness only where declared).

An error over the bound but within what rounding in the Case's dtype
explains is a precision verdict (``PrecisionOnly``, hardening), and
bit-identity between chunkings is demanded only of a target declaring
``bit_exact``; a true defect of each kind still fails as a plain
AssertionError, the contract verdict.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
import torch

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.checks import record
from harness.checks.hidden import check_hidden_chunk_invariance
from harness.checks.parity import check_token_backward, check_token_forward
from harness.checks.tolerance import PRECISION_ULPS, PrecisionOnly, compare
from harness.gate.specs import ROOT

FAKES = "tests/fakes/failure_targets.py:"
BF16_UNIT = torch.finfo(torch.bfloat16).eps


@pytest.fixture(autouse=True)
def _no_ablation(monkeypatch):
    monkeypatch.setenv("LPH_ABLATION", "0")  # what is under test here is the verdict, not the diagnosis


def _off_by(units: float, working_dtype):
    ref = torch.tensor([-0.25, -1.5], dtype=torch.float64)
    actual = ref + units * BF16_UNIT * float(ref.abs().max())
    return compare(actual, ref, ref, what="x", scale=1.0, working_dtype=working_dtype)


def test_a_fraction_of_a_working_unit_is_precision_only():
    result = _off_by(0.8, torch.bfloat16)
    assert not result.ok and result.precision_only


def test_the_same_error_in_an_fp32_case_is_a_contract_failure():
    result = _off_by(0.8, torch.float32)
    assert not result.ok and not result.precision_only


def test_more_than_rounding_explains_is_a_contract_failure():
    result = _off_by(PRECISION_ULPS + 1, torch.bfloat16)
    assert not result.ok and not result.precision_only


def test_bf16_arithmetic_stand_in_is_a_precision_verdict_not_a_contract_fail():
    """Few classes in bf16: its rounding exceeds 2x the naive error, which happened to round well."""
    case = Case(seed=7, vocab=2, samples=((3, 2),), dtype="bfloat16", with_entropy=False, logit_scale=4.0)
    with pytest.raises(PrecisionOnly) as info:
        check_token_forward(case, FAKES + "Bf16Arithmetic")
    assert info.value.precision_only and info.value.comparison.max_error <= info.value.comparison.precision
    assert record.current().precision_only
    check_token_forward(case.with_(dtype="float32"), FAKES + "Bf16Arithmetic")  # right up to rounding


@pytest.mark.parametrize(
    "check, spec",
    [(check_token_forward, "NeighbourToken"), (check_token_backward, "EntropyGradDropped")],
    ids=("forward defect", "backward defect"),
)
def test_true_defects_in_bf16_still_fail_the_contract(check, spec):
    case = Case(seed=7, vocab=8, samples=((5, 3),), dtype="bfloat16")
    with pytest.raises(AssertionError) as info:
        check(case, FAKES + spec)
    assert not isinstance(info.value, PrecisionOnly)
    assert record.current().precision_only is False


def test_one_contract_failure_among_precision_ones_makes_the_test_a_contract_failure():
    """Hypothesis can report a precision-only and a contract failure of one test together."""
    precise = Case(seed=7, vocab=2, samples=((3, 2),), dtype="bfloat16", with_entropy=False, logit_scale=4.0)
    with pytest.raises(PrecisionOnly):
        check_token_forward(precise, FAKES + "Bf16Arithmetic")
    with pytest.raises(AssertionError):
        check_token_forward(Case(seed=7, vocab=8, samples=((5, 3),), dtype="bfloat16"), FAKES + "NeighbourToken")
    with pytest.raises(PrecisionOnly):
        check_token_forward(precise, FAKES + "Bf16Arithmetic")
    assert record.current().precision_only is False


HIDDEN = with_hidden_size(Case(seed=4, vocab=8, samples=((9, 5),), chunk_size=3), 6)


def test_chunking_that_rounds_differently_passes_the_contract_and_fails_bit_for_bit():
    check_hidden_chunk_invariance(HIDDEN, FAKES + "HiddenChunkRounding")
    with pytest.raises(AssertionError, match="not bit-identical"):
        check_hidden_chunk_invariance(HIDDEN, FAKES + "HiddenChunkRounding", exact=True)


def test_a_bit_for_bit_failure_replays_as_bit_for_bit():
    """The replay line carries the keyword the test passed: without ``exact=True`` a pasted line would run the
    tolerant check and print PASS."""
    with pytest.raises(AssertionError) as info:
        check_hidden_chunk_invariance(HIDDEN, FAKES + "HiddenChunkRounding", exact=True)
    (line,) = [n.removeprefix("Replay: ") for n in info.value.__notes__ if n.startswith("Replay: ")]
    assert """--options '{"exact": true}'""" in line, line
    command = [sys.executable, "-m", *shlex.split(line.partition("python -m ")[2])]
    replayed = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "LPH_ABLATION": "0"}
    )
    assert replayed.returncode == 1 and "not bit-identical" in replayed.stdout + replayed.stderr, replayed.stdout


def test_a_chunking_defect_still_fails_the_contract():
    with pytest.raises(AssertionError) as info:
        check_hidden_chunk_invariance(HIDDEN, FAKES + "HiddenChunkDropsRows")
    assert not isinstance(info.value, PrecisionOnly)


def test_a_bit_exact_target_is_still_held_to_bit_identity():
    check_hidden_chunk_invariance(HIDDEN, "impl")  # impl declares bit_exact: the identity branch runs and passes
