"""The NeMo-RL family record's seams, on stand-in checkouts written here (no network, no NeMo-RL checkout).

``tests/fakes/nemo_rl/fixed`` follows NeMo-RL's signatures with correct
arithmetic (and a CP all-gather whose backward runs on the CPU); ``one_hot``
is the same with docs/bugs.md #3 as NeMo-RL HEAD has it; ``hidden`` adds the
fused LM head. The record must load them by path, map shard bounds, the
entropy sign, ``cu_seqlens_padded`` and the zigzag view so the fixed one passes
the token, packed and forward-only checks (TP 1/2, CP 2), the one_hot
regression's mechanism must be seen in the buggy one only, and a stand-in
whose packed composition leaves out its roll must FAIL: the composition that
runs is the stand-in's, not the record's.
"""

import shutil

import pytest
import torch

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.checks.forward_only import check_hidden_forward_only, check_packed_forward_only, check_token_forward_only
from harness.checks.hidden import check_hidden_backward, check_hidden_forward
from harness.checks.ownership import check_shared_logits
from harness.checks.parity import (
    check_packed_backward,
    check_packed_forward,
    check_token_backward,
    check_token_forward,
)
from harness.memory.logits import MemoryCase, measure_token_memory
from harness.memory.tracker import int64_with_dimension
from harness.targets import PackedInputs, load_target, registry
from harness.targets.nemo_rl.family import NEMO_RL
from harness.targets.upstream import packing
from harness.targets.upstream.loader import MissingUpstream
from tests.fakes.nemo_rl import targets as stand_ins

FIXED = f"{stand_ins.__file__}:fixed"
ONE_HOT = f"{stand_ins.__file__}:one_hot"
HIDDEN = f"{stand_ins.__file__}:hidden"
FIXED_TREE = stand_ins.HERE / "fixed"
MODEL_UTILS = "nemo_rl/distributed/model_utils.py"
TOKEN_CASES = [
    Case(seed=1, vocab=12, samples=((6, 4), (5, 2)), chunk_size=3, with_entropy=True),
    Case(seed=2, vocab=16, tp=2, samples=((7, 5),), chunk_size=2, with_entropy=True),
]
PACKED_CASES = [
    Case(seed=3, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=4, with_entropy=True, chunk_size=3),
    Case(seed=4, vocab=16, tp=2, samples=((9, 5), (4, 3)), with_entropy=True),
    Case(seed=5, vocab=12, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 3), (2, 1)), pad_multiple=3, with_entropy=True),
]
HIDDEN_CASE = with_hidden_size(Case(seed=6, vocab=12, samples=((9, 4),), chunk_size=3, with_entropy=False), 6)


def _tree(tmp_path, source=FIXED_TREE, edit=None):
    """A copy of a stand-in tree, its model_utils edited by ``edit(text) -> text``."""
    root = tmp_path / "nemo"
    shutil.copytree(source, root)
    if edit is not None:
        path = root / MODEL_UTILS
        path.write_text(edit(path.read_text()))
    return root


def test_declares_what_the_stand_in_has(monkeypatch):
    monkeypatch.delenv("LPH_DEVICE", raising=False)
    logits = {"token", "chunking", "entropy", "entropy_gate", "packed", "vocab_parallel"}
    assert load_target(FIXED).capabilities == logits | {"cp_zigzag"}
    on_cpu = NEMO_RL.target(FIXED_TREE)
    assert on_cpu.capabilities == logits
    assert ".cuda()" in on_cpu.not_declared["cp_zigzag"]
    assert "#2036" in on_cpu.not_declared["hidden_log_probs"]
    assert "#1920" in on_cpu.not_declared["token_policy_loss"]
    monkeypatch.setenv("LPH_DEVICE", "cuda")  # the record declares CP where NeMo's CP backward can run
    assert "cp_zigzag" in NEMO_RL.target(FIXED_TREE).capabilities


@pytest.mark.parametrize("case", TOKEN_CASES, ids=lambda c: f"tp{c.tp}")
def test_fixed_stand_in_passes_token_checks(case):
    check_token_forward(case, FIXED)
    check_token_backward(case, FIXED)
    check_token_backward(case.with_(chunk_size=None), FIXED)
    check_shared_logits(case, FIXED, backwards=2)
    check_token_forward_only(case, FIXED)


@pytest.mark.parametrize("case", PACKED_CASES, ids=lambda c: f"tp{c.tp}-cp{c.cp}")
def test_fixed_stand_in_passes_packed_checks(case):
    check_packed_forward(case, FIXED)
    check_packed_backward(case, FIXED)
    check_packed_forward_only(case, FIXED)


def test_the_hidden_state_path_is_in_the_family_target():
    """``nemo_rl=PATH`` is one target for every path NeMo-RL ships: the fused LM head where the revision has it."""
    target = load_target(HIDDEN)
    assert "hidden" in target.capabilities and "hidden_tp" not in target.capabilities
    assert target.capabilities_for({"hidden"}) == target.capabilities - {"entropy", "entropy_gate"}
    check_hidden_forward(HIDDEN_CASE, HIDDEN)
    check_hidden_backward(HIDDEN_CASE, HIDDEN)
    check_hidden_forward_only(HIDDEN_CASE, HIDDEN)
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED"):
        check_hidden_forward(HIDDEN_CASE.with_(with_entropy=True), HIDDEN)


def test_a_composition_that_leaves_out_its_roll_fails(tmp_path):
    """The packed entry point hands NeMo unrolled tokens: a composition that forgets to roll them is what runs."""

    def without_roll(text):
        assert text.count(".roll(-1, 0)") == 1
        return text.replace(".roll(-1, 0)", "")

    root = _tree(tmp_path, edit=without_roll)
    case = PACKED_CASES[0]
    check_packed_forward(case, FIXED)
    with pytest.raises(AssertionError, match="log_probs"):
        check_packed_forward(case, f"nemo_rl={root}")


def test_entropy_sign_is_mapped():
    """NeMo returns sum p log p; the record must hand the suite the positive entropy."""
    logits = torch.randn(5, 7)
    _, entropy = load_target(FIXED).token_log_probs(
        logits, torch.zeros(5, dtype=torch.long), tp_group=None, chunk_size=2,
        with_entropy=True, entropy_grad=False, temperature=1.0,
    )  # fmt: skip
    expected = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1)
    assert bool((entropy > 0).all())
    torch.testing.assert_close(entropy, expected)


def test_one_hot_stand_in_is_caught_and_fixed_one_is_not():
    case = MemoryCase(rows=4096, vocab_local=5000, with_entropy=False)
    buggy = int64_with_dimension(measure_token_memory(case, load_target(ONE_HOT)).allocations, case.vocab_local)
    fixed = int64_with_dimension(measure_token_memory(case, load_target(FIXED)).allocations, case.vocab_local)
    assert buggy and not fixed
    assert {a.shape for a in buggy} >= {(1, 1024, 5000)}


def test_zigzag_view_mapping_matches_the_layout():
    """cu_seqlens_padded and the per-rank rows of the view, worked by hand for T=(9, 5), cp=2 (chunks of 3 and 2)."""
    inputs = PackedInputs(
        tokens=[torch.arange(9), torch.arange(5)], total_lengths=[9, 5], response_lengths=[6, 3],
        loss_masks=[torch.ones(6), torch.ones(3)], qkv_format="thd", pad_multiple=1, cp_mode="zigzag",
    )  # fmt: skip
    assert packing.cu_seqlens_padded(inputs, 2, "cpu").tolist() == [0, 12, 20]
    # rank 0 holds chunks 0 and 3: positions 0-2 and 9-11 of sample 0 (none predict beyond 7), 0-1 and 6-7 of sample 1
    assert packing.view_positions(inputs, 2, 0) == [[2], [1]]
    assert packing.view_local_rows(inputs, 2, 0) == [[2], [7]]
    assert packing.view_positions(inputs, 2, 1) == [[3, 4, 5, 6, 7], [2, 3]]
    assert packing.view_local_rows(inputs, 2, 1) == [[0, 1, 2, 3, 4], [6, 7]]


def test_missing_checkout_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=MODEL_UTILS):
        registry.target("nemo_rl", tmp_path)


def test_a_revision_without_the_token_function_is_an_error_naming_it(tmp_path):
    root = _tree(tmp_path, edit=lambda text: text.replace("class DistributedLogprob(", "class _Gone("))
    with pytest.raises(MissingUpstream, match=f"DistributedLogprob in {MODEL_UTILS} \\(absent\\)"):
        NEMO_RL.target(root)


def test_a_revision_before_the_chunked_function_declares_token_without_chunking(tmp_path):
    """Before #918 (2025-08) NeMo-RL has ``DistributedLogprob`` but no ``ChunkedDistributedLogprob`` (nor, before
    #1006, ``ChunkedDistributedEntropy``): ``token`` is declared there and runs, ``chunking``/``entropy`` are not."""

    def older(text):
        for name in ("ChunkedDistributedLogprob", "ChunkedDistributedEntropy"):
            assert f"class {name}(" in text
            text = text.replace(f"class {name}(", f"class _Absent{name}(")
        return text

    root = _tree(tmp_path, edit=older)
    assert NEMO_RL.target(root).capabilities == {"token", "packed", "vocab_parallel"}
    case = Case(seed=2, vocab=16, tp=2, samples=((7, 5),), with_entropy=False)
    check_token_forward(case, f"nemo_rl={root}")
    check_token_backward(case, f"nemo_rl={root}")


def test_history_keys_are_the_files_the_loader_executed():
    target = load_target(HIDDEN)
    assert target.executed == (MODEL_UTILS,)
    assert registry.family("nemo_rl") is NEMO_RL
