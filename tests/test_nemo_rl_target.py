"""The NeMo-RL adapter's seams, on stand-in checkouts written here (no network, no NeMo-RL checkout).

``tests/fakes/nemo_rl/fixed`` follows NeMo-RL's signatures with correct
arithmetic (and a CP all-gather whose backward runs on the CPU);
``one_hot`` is the same with docs/bugs.md #3 as NeMo-RL HEAD has it. The adapter must
load both by path, map shard bounds, the entropy sign, ``cu_seqlens_padded`` and
the zigzag view so the fixed one passes the token and packed checks (TP 1/2,
CP 2), and the one_hot regression's check must fail the buggy one only.
"""

import pytest
import torch

from harness.cases.case import Case
from harness.checks.ownership import check_shared_logits
from harness.checks.parity import (
    check_packed_backward,
    check_packed_forward,
    check_token_backward,
    check_token_forward,
)
from harness.memory.logits import MemoryCase, measure_token_memory
from harness.memory.tracker import int64_with_dimension
from harness.targets import PackedInputs, load_target
from harness.targets.nemo_rl.token import PATH_VARIABLE, NemoRLTarget
from harness.targets.upstream import packing
from tests.fakes.nemo_rl import targets as stand_ins

FIXED = f"{stand_ins.__file__}:fixed"
ONE_HOT = f"{stand_ins.__file__}:one_hot"
TOKEN_CASES = [
    Case(seed=1, vocab=12, samples=((6, 4), (5, 2)), chunk_size=3, with_entropy=True),
    Case(seed=2, vocab=16, tp=2, samples=((7, 5),), chunk_size=2, with_entropy=True),
]
PACKED_CASES = [
    Case(seed=3, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=4, with_entropy=True, chunk_size=3),
    Case(seed=4, vocab=16, tp=2, samples=((9, 5), (4, 3)), with_entropy=True),
    Case(seed=5, vocab=12, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 3), (2, 1)), pad_multiple=3, with_entropy=True),
]


def test_declares_what_the_stand_in_has():
    assert load_target(FIXED).capabilities == {"token", "chunking", "entropy", "entropy_gate", "packed", "cp_zigzag"}


@pytest.mark.parametrize("case", TOKEN_CASES, ids=lambda c: f"tp{c.tp}")
def test_fixed_stand_in_passes_token_checks(case):
    check_token_forward(case, FIXED)
    check_token_backward(case, FIXED)
    check_token_backward(case.with_(chunk_size=None), FIXED)
    check_shared_logits(case, FIXED, backwards=2)


@pytest.mark.parametrize("case", PACKED_CASES, ids=lambda c: f"tp{c.tp}-cp{c.cp}")
def test_fixed_stand_in_passes_packed_checks(case):
    check_packed_forward(case, FIXED)
    check_packed_backward(case, FIXED)


def test_entropy_sign_is_mapped():
    """NeMo returns sum p log p; the adapter must hand the suite the positive entropy."""
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


def test_missing_checkout_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=PATH_VARIABLE):
        NemoRLTarget()


def test_cuda_only_cp_backward_is_not_declared_on_cpu(tmp_path, monkeypatch):
    """A revision whose CP all-gather backward calls ``.cuda(`` cannot run CP on a CPU: not declared there."""
    source = (stand_ins.HERE / "fixed" / "nemo_rl" / "distributed" / "model_utils.py").read_text()
    marker = "        grad = grad_output.contiguous().clone()\n"
    assert marker in source
    cuda_only = source.replace(
        marker, marker + "        _ = torch.tensor([0]).cuda(non_blocking=True) if False else None\n"
    )
    target_file = tmp_path / "nemo_rl" / "distributed" / "model_utils.py"
    target_file.parent.mkdir(parents=True)
    target_file.write_text(cuda_only)
    monkeypatch.delenv("LPH_DEVICE", raising=False)
    assert "cp_zigzag" not in NemoRLTarget(tmp_path).capabilities
    monkeypatch.setenv("LPH_DEVICE", "cuda")
    assert "cp_zigzag" in NemoRLTarget(tmp_path / ".").capabilities


def test_a_revision_before_the_chunked_function_declares_token_without_chunking(tmp_path):
    """Before #918 (2025-08) NeMo-RL has ``DistributedLogprob`` but no ``ChunkedDistributedLogprob`` (nor, before
    #1006, ``ChunkedDistributedEntropy``): ``token`` is declared there and runs, ``chunking``/``entropy`` are not."""
    source = (stand_ins.HERE / "fixed" / "nemo_rl" / "distributed" / "model_utils.py").read_text()
    for name in ("ChunkedDistributedLogprob", "ChunkedDistributedEntropy"):
        assert f"class {name}(" in source
        source = source.replace(f"class {name}(", f"class _Absent{name}(")
    target_file = tmp_path / "nemo_rl" / "distributed" / "model_utils.py"
    target_file.parent.mkdir(parents=True)
    target_file.write_text(source)
    assert NemoRLTarget(tmp_path).capabilities == {"token", "packed", "cp_zigzag"}
    adapter = tmp_path / "old_nemo.py"
    adapter.write_text(
        "from harness.targets.nemo_rl.token import NemoRLTarget\n\n"
        f"class T(NemoRLTarget):\n    def __init__(self):\n        super().__init__({str(tmp_path)!r})\n"
    )
    case = Case(seed=2, vocab=16, tp=2, samples=((7, 5),), with_entropy=False)
    check_token_forward(case, f"{adapter}:T")
    check_token_backward(case, f"{adapter}:T")


def test_the_family_target_carries_the_hidden_state_path_where_the_revision_has_it():
    """``nemo_rl=PATH`` is one target for every path NeMo-RL ships; the stand-in has no hidden-state Function, so
    the path is not declared and says why (a revision with it declares ``hidden``, judged by its own options)."""
    from harness.targets import registry

    target = registry.target("nemo_rl", stand_ins.HERE / "fixed")
    assert "hidden" not in target.capabilities
    assert "ChunkedDistributedHiddenStatesToLogprobs" in target.not_declared["hidden_log_probs"]
    assert registry.family("nemo_rl").hidden.endswith(":NemoRLHiddenTarget")
    assert "nemo_rl/distributed/model_utils.py" in registry.family("nemo_rl").files
