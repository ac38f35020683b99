"""The vLLM sampler adapter's seams, on stand-in checkouts written here (no network, no vLLM checkout).

``tests/fakes/vllm/correct`` has the signature of vLLM's
``apply_top_k_top_p_pytorch`` and the lifecycle of its ``MinPLogitsProcessor``
with correct arithmetic and imports that cannot run here; ``unrenormalised``
has top-p read off the full softmax (not renormalised over top-k's
survivors), and no min-p file. The adapter must load the one
function without those imports, gather TP shards to full rows as vLLM does,
map top-k / top-p / temperature / chunks so the correct stand-in passes the
derived-``K`` check at TP 1 and 2, and the check must fail the defective one;
what the sampler lacks reads UNSUPPORTED.
"""

import sys

import pytest

from harness.cases.case import Case
from harness.cases.sampling import sampling_case
from harness.checks.sampling import check_sampling
from harness.gate.specs import resolve
from harness.targets import load_target
from harness.targets.vllm.family import VLLM
from tests.fakes.vllm import targets as stand_ins

CORRECT = f"{stand_ins.__file__}:correct"
UNRENORMALISED = f"{stand_ins.__file__}:unrenormalised"
CASES = [
    sampling_case(
        Case(seed=31, vocab=12, samples=((8, 4),), with_entropy=False, temperature=0.7),
        kept="derived",
        form="derived",
        top_k=3,
    ),
    # TP 2 (gathered to full rows), chunks of 3 rows, top-k then top-p; top_k 20 > V is "every column"
    sampling_case(
        Case(seed=32, vocab=16, tp=2, samples=((7, 5),), chunk_size=3, with_entropy=False, logit_scale=3.0),
        kept="derived",
        form="derived",
        top_k=4,
        top_p=0.8,
    ),
    sampling_case(
        Case(seed=33, vocab=8, samples=((6, 4),), with_entropy=False), kept="derived", form="derived", top_k=20
    ),
    # min-p before top-k, after the temperature
    sampling_case(
        Case(seed=34, vocab=16, tp=2, samples=((6, 5),), with_entropy=False, temperature=0.7, logit_scale=3.0),
        kept="derived",
        form="derived",
        top_k=5,
        min_p=0.1,
    ),
]


def test_declares_what_the_sampler_has():
    capabilities = load_target(CORRECT).capabilities
    assert {"sampling", "sampling_derived", "sampling_neg_inf", "temperature", "chunking"} <= capabilities
    assert "sampling_min_p" in capabilities
    assert not {"sampling_csr", "sampling_dense", "sampling_entropy", "sampling_ties_all"} & capabilities
    assert "sampling_min_p" not in load_target(UNRENORMALISED).capabilities  # no min-p file in that checkout


def test_loads_one_function_without_the_modules_imports():
    target = load_target(CORRECT)
    assert target.name == "vllm"  # a stand-in without .git names no revision
    assert "vllm" not in sys.modules and "vllm.envs" not in sys.modules


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}-k{c.extra['sampling']['top_k']}-seed{c.seed}")
def test_correct_stand_in_passes(case):
    check_sampling(case, CORRECT)


def test_top_p_over_the_full_softmax_fails():
    with pytest.raises(AssertionError, match="log_probs over K"):
        check_sampling(CASES[1], UNRENORMALISED)


def test_a_given_kept_set_is_unsupported():
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED"):
        check_sampling(sampling_case(CASES[0], kept="random", form="csr"), CORRECT)


def test_min_p_without_its_file_is_unsupported():
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED"):
        check_sampling(CASES[3], UNRENORMALISED)


def test_entropy_is_unsupported():
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED"):
        check_sampling(CASES[0].with_(with_entropy=True), CORRECT)


def test_a_checkout_without_the_sampler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(VLLM.locate.variable, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=f"{VLLM.locate.variable}=.*topk_topp_sampler.py"):
        VLLM.target()
    with pytest.raises(FileNotFoundError, match="topk_topp_sampler.py"):
        VLLM.target(tmp_path)


def test_a_sampler_file_without_the_function_is_an_error_naming_it(tmp_path):
    """Declared means present: the file the record names without its function is a load ERROR, never UNSUPPORTED."""
    sampler = tmp_path / "vllm/v1/sample/ops/topk_topp_sampler.py"
    sampler.parent.mkdir(parents=True)
    sampler.write_text("def apply_top_k_top_p(logits, k, p):\n    return logits\n")
    with pytest.raises(LookupError, match="apply_top_k_top_p_pytorch in vllm/v1/sample/ops/topk_topp_sampler.py"):
        VLLM.target(tmp_path)


def test_the_gate_knows_the_family(tmp_path):
    resolved = resolve(f"vllm={tmp_path}")
    assert resolved.family == "vllm"
    assert resolved.run_as == f"vllm={tmp_path.resolve()}"
    assert resolved.env == {VLLM.locate.variable: str(tmp_path.resolve())}


def test_a_release_spec_installs_the_wheel_without_dependencies():
    """``vllm==X``: the wheel's sampler files serve (``--no-deps``: only they are executed)."""
    resolved = resolve("vllm==9.9.9")
    assert resolved.family == "vllm" and resolved.pip_requirement == "vllm==9.9.9"
