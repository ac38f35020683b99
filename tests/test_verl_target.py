"""Self-tests of the verl adapters (harness/targets/verl/) on stand-in trees: no network, no verl.

The stand-ins under tests/fakes/verl/ follow the signatures of the verl
functions the adapters call, with plain torch arithmetic. These tests exercise
the seams: finding the tree, executing the files under test as private modules
with Megatron and verl's trainer imports stood in, the composition of verl's
Megatron logits processor (temperature in the logits' dtype, entropy on the
divided logits, log-probs on their backup), the PPO loss through verl's
registry and aggregation, the fused torch LM-head path, the chunked-entropy
backward defect of verl 0.9.1 failing the checks while the correct one passes,
and the packed level: verl's thd helpers (a stand-in padding to ``tp·cp·2``,
not the harness's ``2·cp``) run on the harness's rows re-laid out across CP
ranks, and a label roll done per CP chunk fails the packed check.
"""

import sys

import pytest
import torch

from harness.cases.case import Case
from harness.checks.hidden import check_hidden_backward, check_hidden_forward
from harness.checks.parity import check_packed_backward, check_packed_forward, check_token_backward, check_token_forward
from harness.checks.policy import check_policy_loss
from harness.gate import specs
from harness.targets import PackedInputs, registry
from harness.targets.verl import source
from harness.targets.verl.token import VerlTarget, divided
from tests.fakes.verl import targets as fakes

CORRECT = f"{fakes.__file__}:correct"
VIEW_WRITING = f"{fakes.__file__}:view_writing"
FUSED = f"{fakes.__file__}:fused_torch"
CHUNK_ROLLED = f"{fakes.__file__}:chunk_rolled"
TOKEN_CASE = Case(seed=7, vocab=10, samples=((9, 4),), temperature=2.5, with_entropy=True)
POLICY_CASE = Case(seed=5, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=3, mask_mode="mixed")


def test_tree_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(source.PATH_VARIABLE, str(fakes.HERE / "correct"))
    assert VerlTarget().root == (fakes.HERE / "correct").resolve()
    monkeypatch.setenv(source.PATH_VARIABLE, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="verl/utils/megatron/tensor_parallel.py"):
        source.verl_root()


def test_loading_stands_in_only_while_loading():
    target = fakes.correct()
    options = {
        "token_policy_loss",
        "token_policy_entropy",
        "policy_dual_clip",
        "policy_agg_seq-mean-token-mean",
    }  # what the fake's loss has
    packed = {"packed", "cp_zigzag", "cp_allgather"}
    assert target.capabilities == {"token", "entropy", "chunking", "temperature", "policy_loss"} | options | packed
    assert not [name for name in sys.modules if name == "verl" or name.startswith("verl.")]
    assert "tensordict" not in sys.modules, "import-only placeholders must not outlive the load"
    assert "megatron.core.packed_seq_params" not in sys.modules, "the PackedSeqParams stand-in is for loading only"
    # A verl tree without core_algos has no policy loss; one without models/mcore/util.py no packed level.
    assert not fakes.view_writing().capabilities & ({"policy_loss"} | packed)


def test_temperature_is_rounded_to_the_logits_dtype_as_verl_divides():
    logits = torch.randn(3, 5).to(torch.bfloat16)
    expected = logits / torch.tensor(0.7).to(torch.bfloat16)
    assert torch.equal(divided(logits, 0.7), expected)
    assert torch.tensor(0.7).to(torch.bfloat16).item() == 0.69921875  # the divisor verl uses in bf16


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_token_level_matches_the_oracle(chunk_size):
    case = TOKEN_CASE.with_(chunk_size=chunk_size)
    check_token_forward(case, CORRECT)
    check_token_backward(case, CORRECT)


def test_chunked_entropy_writing_its_saved_view_fails_the_backward():
    check_token_backward(TOKEN_CASE, VIEW_WRITING)  # one chunk: the write is undone before anything reads it
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        check_token_backward(TOKEN_CASE.with_(chunk_size=2), VIEW_WRITING)


@pytest.mark.parametrize("coef", [0.0, -0.5])
def test_policy_loss_through_verls_registry(coef):
    check_policy_loss(POLICY_CASE.with_(entropy_coef=coef, with_entropy=True), CORRECT)
    check_policy_loss(POLICY_CASE.with_(with_entropy=False), CORRECT)


def test_cp_mode_without_a_cp_group_is_refused_clearly():
    inputs = PackedInputs([torch.tensor([1, 2, 3])], [3], [2], [torch.ones(2)], "thd", 1, cp_mode="zigzag")
    with pytest.raises(ValueError, match="cp_group"):
        fakes.correct().policy_loss(
            torch.zeros(3, 4),
            inputs,
            advantages=[torch.zeros(2)],
            old_log_probs=[torch.zeros(2)],
            eps_clip=0.2,
            eps_clip_high=0.2,
            entropy_coef=0.0,
            with_entropy=False,
            tp_group=None,
            cp_group=None,
            chunk_size=None,
            temperature=1.0,
            response_only=False,
            loss_mask_only=False,
        )


PACKED_CASES = [
    # tp 2 without CP: verl pads every sequence to a multiple of tp, the harness not at all
    Case(seed=4, vocab=16, tp=2, samples=((9, 5), (4, 3)), pad_multiple=3, temperature=0.7, with_entropy=True),
    # tp 2 x cp 2: verl's zigzag chunks are tp*cp*2-aligned, the harness's 2*cp-aligned (rows cross ranks)
    Case(seed=5, vocab=12, tp=2, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 3), (2, 1)), with_entropy=True),
    Case(seed=6, vocab=12, cp=2, cp_mode="allgather", samples=((9, 6), (3, 2)), pad_multiple=3, chunk_size=2),
]


@pytest.mark.parametrize("case", PACKED_CASES, ids=lambda c: f"tp{c.tp}-cp{c.cp}-{c.cp_mode}")
def test_packed_level_runs_verls_thd_helpers_on_the_harness_rows(case):
    check_packed_forward(case, CORRECT)
    check_packed_backward(case, CORRECT)


def test_policy_loss_under_cp_reads_verls_whole_batch_loss_as_each_ranks_share():
    case = PACKED_CASES[1].with_(tp=1, mask_mode="mixed", entropy_coef=0.1)
    check_policy_loss(case, CORRECT)


def test_label_roll_per_cp_chunk_fails_the_packed_check():
    case = PACKED_CASES[1].with_(tp=1)
    check_packed_forward(case.with_(cp=1, cp_mode="none"), CHUNK_ROLLED)  # one rank: the chunk is the sequence
    with pytest.raises(AssertionError):
        check_packed_forward(case, CHUNK_ROLLED)


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_fused_torch_path_matches_the_oracle(chunk_size):
    case = Case(seed=3, vocab=11, samples=((8, 7),), chunk_size=chunk_size, temperature=0.7, extra={"hidden_size": 5})
    check_hidden_forward(case, FUSED)
    check_hidden_backward(case, FUSED)


def test_gate_and_history_know_the_family():
    resolved = specs.resolve("verl==0.9.1")
    assert resolved.family == "verl" and resolved.pip_requirement == "verl==0.9.1"
    assert resolved.env == {"LPH_VERL_PATH": str(specs.PACKAGES / "verl-0.9.1")}
    assert registry.family("verl").files == (*source.FILES_UNDER_TEST, source.FUSED_TORCH)


def test_the_family_target_carries_the_hidden_state_path():
    """``verl=PATH`` / ``verl==X`` is one target for every path verl ships: its fused LM head is the family's
    ``hidden_log_probs``, judged by that path's own options (one rank: ``hidden_tp`` is not among them)."""
    from harness.cases.hidden import with_hidden_size
    from harness.checks.hidden import check_hidden_backward, check_hidden_forward

    target = registry.target("verl", fakes.HERE / "correct")
    assert {"hidden", "packed", "token"} <= target.capabilities
    assert target.capabilities_for({"hidden"}) == {"hidden", "entropy", "chunking", "temperature"}
    case = with_hidden_size(Case(seed=3, vocab=12, samples=((7, 4),), chunk_size=3, temperature=0.7), 5)
    spec = f"verl={fakes.HERE / 'correct'}"
    check_hidden_forward(case, spec)
    check_hidden_backward(case, spec)
    assert registry.family("verl").expectations == ("verl.toml", "verl-hidden.toml")
