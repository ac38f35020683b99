"""The ms-swift record's seams, on ``tests/fakes/ms_swift`` and ``tests/fakes/megatron`` (no ms-swift, no Megatron).

The ms-swift stand-in's trainer file imports absent packages (only its
methods can be loaded) and its utilities import ``from megatron.core import
mpu, tensor_parallel`` as the real file does; the Megatron stand-in is a
second root whose cross entropy subtracts the row max in place and whose
``megatron/core/utils.py`` imports a CUDA-only module at its top, so only the
names its tensor-parallel files import may be taken from it. What runs is the
stand-in's ``forward_step``: a composition that leaves out a step fails.
"""

import pytest
import torch

from harness.cases.case import Case
from harness.checks.forward_only import check_packed_forward_only, check_token_forward_only
from harness.checks.parity import check_packed_backward, check_packed_forward, check_token_backward, check_token_forward
from harness.ranks.errors import RankError
from harness.targets import load_target
from harness.targets.upstream.loader import MissingUpstream
from tests.fakes.reach_targets import HERE, MsSwift, ms_swift_copy

SPEC = "tests/fakes/reach_targets.py:MsSwift"
CASES = [
    Case(seed=1, vocab=12, samples=((6, 4),), temperature=0.8, with_entropy=True),
    Case(seed=2, vocab=16, tp=2, samples=((5, 3),), with_entropy=True),
]
PACKED = [
    Case(seed=3, vocab=12, samples=((7, 3), (5, 2)), with_entropy=True, temperature=0.8, pad_multiple=4),
    Case(seed=4, vocab=12, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 0), (6, 2)), with_entropy=True),
]
TRAINER = "swift/megatron/trainers/grpo_trainer.py"
UTILS = "swift/megatron/trainers/vocab_parallel_utils.py"


def _edited(tmp_path, path, old, new):
    """A copy of the stand-in tree with one edit of ``path``, and a target spec on it."""
    return ms_swift_copy(tmp_path, edits=[(path, old, new)])


def test_declares_what_its_trainer_has_and_keys_both_roots():
    target = load_target(SPEC)
    assert target.name == "ms_swift-0.0.0+stand-in"
    assert {"token", "entropy", "temperature", "token_policy_loss"} <= target.capabilities
    assert {"packed", "cp_zigzag"} <= target.capabilities
    assert {"entropy_gate", "chunking", "cp_allgather"} <= set(target.not_declared)
    assert {TRAINER, UTILS, "megatron/core/tensor_parallel/cross_entropy.py", "megatron/core/utils.py"} <= set(
        target.executed
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}")
def test_passes_parity_with_entropy(case):
    check_token_forward(case, SPEC)
    check_token_backward(case, SPEC)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}")
def test_forward_only_matches_the_grad_enabled_call(case):
    check_token_forward_only(case, SPEC)


@pytest.mark.parametrize("no_grad", [False, True], ids=["grad", "no_grad"])
def test_megatron_in_place_shift_and_the_temperature_never_reach_the_callers_logits(no_grad):
    logits = torch.randn(4, 6, requires_grad=not no_grad)
    before = logits.detach().clone()
    options = {"tp_group": None, "chunk_size": None, "with_entropy": True, "entropy_grad": True, "temperature": 0.7}
    with torch.set_grad_enabled(not no_grad):
        log_probs, _ = MsSwift().token_log_probs(logits, torch.tensor([0, 5, 2, 1]), **options)
    assert torch.equal(logits.detach(), before)
    assert torch.allclose(log_probs, torch.log_softmax(before / 0.7, -1)[range(4), [0, 5, 2, 1]], atol=1e-6)


def test_a_composition_without_its_temperature_step_fails(tmp_path):
    """The division is the trainer's step, not the record's: a forward_step that drops it fails parity."""
    _root, spec = _edited(tmp_path, TRAINER, "output.div_(self.temperature)", "pass")
    with pytest.raises(AssertionError):
        check_token_forward(CASES[0], spec)


def test_an_autograd_reduce_of_the_entropy_fails_the_gradient(tmp_path):
    """The reduction ms-swift's comment warns against (autograd-aware: tp times the gradient) must fail at tp=2."""
    group = "group=mpu.get_tensor_model_parallel_group())"
    raw = f"        torch.distributed.all_reduce(partial, {group}\n        entropy = partial"
    _root, spec = _edited(tmp_path, UTILS, raw, f"        entropy = torch.distributed.nn.all_reduce(partial, {group}")
    check_token_forward(CASES[1], spec)
    with pytest.raises(AssertionError, match="grad"):
        check_token_backward(CASES[1], spec)


def test_a_trainer_without_its_forward_step_is_an_error_naming_it(tmp_path):
    root, _spec = _edited(tmp_path, TRAINER, "def forward_step(", "def renamed_forward_step(")
    with pytest.raises(MissingUpstream, match="MegatronGRPOTrainer.forward_step"):
        MsSwift(root)


def test_a_forward_step_reading_batch_keys_the_record_does_not_hand_it_is_an_error_naming_them(tmp_path):
    """A key of the batch the record does not map is a load ERROR naming it, never a check FAIL (KeyError). The
    layout before #9580 is tests/test_ms_swift_columns.py's."""
    old = 'grpo_batch: GRPOBatch = data.pop("grpo_batch")'
    root, _spec = _edited(tmp_path, TRAINER, old, f'{old}\n        data.pop("routed_experts_mask")')
    with pytest.raises(MissingUpstream, match=r"forward_step reads the batch's \['routed_experts_mask'\]"):
        MsSwift(root)


def test_pandas_for_the_completions_table_is_stood_in(tmp_path):
    """loss_func (2025-11..2026-06) builds a pandas table of completions for wandb when log_completions is on: the
    record binds ``pd`` to an object that refuses use (never imported, installed or not), so the loss loads."""
    old = 'batch = data["grpo_batch"]'
    table = "if self.log_completions_to_wandb:\n            pd.DataFrame({})\n        "
    pandas = ("import torch\n", "import pandas as pd\nimport torch\n")
    root, _spec = ms_swift_copy(tmp_path, edits=[(TRAINER, old, table + old), (TRAINER, *pandas)])
    assert "token_policy_loss" in MsSwift(root).capabilities


def test_a_checkout_before_the_log_prob_utilities_names_what_it_lacks(tmp_path):
    """ms-swift before #7263 (2025-12-31) has no vocab_parallel_utils.py: a load ERROR naming it, not "no checkout"."""
    root, _spec = ms_swift_copy(tmp_path, removed=[UTILS])
    with pytest.raises(MissingUpstream, match="vocab_parallel_utils.py"):
        MsSwift(root)


@pytest.mark.parametrize("case", PACKED, ids=lambda c: f"cp{c.cp}")
def test_packed_passes_parity_and_forward_only(case):
    check_packed_forward(case, SPEC)
    check_packed_backward(case, SPEC)
    check_packed_forward_only(case, SPEC)


def test_a_packed_composition_without_its_cp_reconstruction_fails(tmp_path):
    """Gathering the sequences whole is forward_step's step: one that skips it fails zigzag CP (its batch step
    then meets a rank's rows where it wants whole sequences)."""
    _root, spec = _edited(tmp_path, TRAINER, "if args.context_parallel_size > 1:", "if False:")
    check_packed_forward(PACKED[0], spec)
    with pytest.raises(RankError, match="must match the existing size"):
        check_packed_forward(PACKED[1], spec)


def test_token_ids_that_do_not_fill_their_sample_are_refused_by_name():
    """The labels are built from the token ids: a short row must not broadcast into wrong labels."""
    from harness.targets.protocol import PackedInputs

    inputs = PackedInputs([torch.tensor([1, 2, 3])], [5], [3], [torch.ones(3)], "thd", 1)
    options = {"tp_group": None, "cp_group": None, "chunk_size": None, "with_entropy": False, "entropy_grad": True}
    flags = {"temperature": 1.0, "response_only": False, "loss_mask_only": False}
    with pytest.raises(ValueError, match=r"tokens\[0\]"):
        MsSwift().packed_log_probs(torch.randn(5, 6), inputs, **options, **flags)


def test_megatron_root_is_required_and_named(monkeypatch):
    from harness.targets.ms_swift.family import MS_SWIFT

    monkeypatch.delenv("LPH_MEGATRON_PATH", raising=False)
    with pytest.raises((ModuleNotFoundError, FileNotFoundError), match="LPH_MEGATRON_PATH"):
        MS_SWIFT.target(HERE / "ms_swift")


def test_an_installed_megatron_is_found_beside_the_stand_in(monkeypatch):
    """Without LPH_MEGATRON_PATH the installed package serves, though the kernel's stand-in holds ``megatron``."""
    from harness.targets.ms_swift.family import MS_SWIFT
    from harness.targets.upstream import megatron_stand_in

    megatron_stand_in.install()
    monkeypatch.delenv("LPH_MEGATRON_PATH", raising=False)
    monkeypatch.syspath_prepend(str(HERE / "megatron"))
    target = MS_SWIFT.target(HERE / "ms_swift")
    assert target.up.megatron.loader.root == HERE / "megatron"


def test_spec_installs_the_pypi_distribution_and_names_its_directory():
    from harness.gate import specs

    resolved = specs.resolve("ms_swift==9.9.9")
    assert resolved.family == "ms_swift" and resolved.pip_requirement == "ms-swift==9.9.9"
    assert resolved.env == {"LPH_MS_SWIFT_PATH": str(specs.PACKAGES / "ms_swift-9.9.9")}
