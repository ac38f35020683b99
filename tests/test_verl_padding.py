"""verl's padding step before ppo_loss: the trainer's left-right batch, verl's own left_right_2_no_padding, and the
flash-attn / tensordict stand-ins those helpers need on a CPU (harness/targets/verl/padding.py).

From #3600 to #5115 ppo_loss read what left_right_2_no_padding stored (``indices``); the record once built only the
later form's entries, so every policy check there failed on verl's ``indices is required``: the adapter's error.
"""

from __future__ import annotations

import ast

import pytest
import torch

from harness.checks.failure import CheckFailure
from harness.checks.policy import check_policy_loss
from harness.checks.token_policy import check_token_policy_loss
from harness.targets import PackedInputs
from harness.targets.upstream.loader import MissingUpstream
from harness.targets.verl import engine as verl_engine
from harness.targets.verl import family, padding
from tests.fakes.verl import targets as fakes
from tests.test_verl_target import LOSSES, POLICY_CASE, _edited

INDICES_FORM = fakes.HERE / "padding_indices.py"


def _tree(tmp_path, name: str, shift: int = 1) -> str:
    """The correct tree whose ppo_loss imports the #3600..#5115 padding helpers (slicing ``shift`` columns early)."""
    spec = _edited(
        tmp_path,
        name,
        LOSSES,
        ("def no_padding_2_padding(", "def _own_padding("),
        ("\nENTROPY_TERM", "\nfrom verl.workers.utils.padding import no_padding_2_padding\n\nENTROPY_TERM"),
    )
    text = INDICES_FORM.read_text().replace("SHIFT = 1", f"SHIFT = {shift}")
    (tmp_path / name / "verl/workers/utils/padding.py").write_text(text)
    return spec


def test_unpad_keeps_the_marked_positions_and_pad_puts_them_back():
    torch.manual_seed(0)
    lengths = [(5, 2), (3, 1), (4, 3)]
    batch = padding.left_right(lengths, "cpu")
    mask = batch["attention_mask"]
    assert mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    assert batch["response_mask"].sum(1).tolist() == [2, 1, 3]
    x = torch.randn(3, 6, 2, requires_grad=True)
    kept, indices, offsets, longest, each = padding.unpad_input(x, mask)
    assert indices.tolist() == torch.nonzero(mask.flatten()).flatten().tolist()
    assert offsets.tolist() == [0, 5, 8, 12] and longest == 5 and each.tolist() == [5, 3, 4]
    assert torch.equal(kept, x.reshape(18, 2)[indices])
    back = padding.pad_input(kept, indices, 3, 6)
    assert torch.equal(back, x * mask.unsqueeze(-1))
    back.sum().backward()
    assert torch.equal(x.grad, mask.unsqueeze(-1).expand(3, 6, 2).float())


def test_older_files_get_flash_attns_helpers_where_a_cuda_process_binds_them():
    module = type(torch)("older_padding")
    padding.bind_flash_attn(module)
    assert module.pad_input is padding.pad_input and module.unpad_input is padding.unpad_input
    own = type(torch)("newer_padding")
    own.unpad_input = print
    padding.bind_flash_attn(own)
    assert own.unpad_input is print  # a revision's own binding is kept


@pytest.mark.parametrize("check", [check_token_policy_loss, check_policy_loss])
def test_the_indices_form_runs_verls_own_padding_step(tmp_path, check):
    check(POLICY_CASE.with_(entropy_coef=-0.5, with_entropy=True), _tree(tmp_path, "indices-form"))


@pytest.mark.parametrize("check", [check_token_policy_loss, check_policy_loss])
def test_a_padding_helper_that_slices_one_column_late_fails(tmp_path, check):
    """The output at position p holds token p + 1: responses read one column late are another token's values."""
    spec = _tree(tmp_path, "late-slice", shift=0)
    with pytest.raises(CheckFailure, match="policy loss"):
        check(POLICY_CASE.with_(entropy_coef=-0.5, with_entropy=True), spec)


def test_a_loss_with_its_own_slicing_helper_gets_the_per_position_form(tmp_path):
    """2025-11-29..2026-02-04 (#4352 to #5115) ppo_loss sliced the engine's output with a helper of its own
    (``_slice_response_from_unpad_output``): that is the per-position form too, not the older ``[B, R]`` one."""
    own = _edited(tmp_path, "own-helper", LOSSES, ("no_padding_2_padding", "_slice_response_from_unpad_output"))
    check_token_policy_loss(POLICY_CASE.with_(entropy_coef=-0.5, with_entropy=True), own)


def _forward_step(source: str):
    return ast.parse(f"def forward_step(self, batch):\n    {source}\n").body[0]


def test_the_processor_gets_the_arguments_forward_step_builds():
    """#4981..#5204 (2026-01/02) the engine forward popped forward_step's ``loss_mask`` unconditionally: the record
    reads the keys forward_step builds, and a key it does not map is an ERROR naming it, never left out silently."""
    assert family.processor_arguments(_forward_step('logits_processor_args = {"label": label}')) == {"label"}
    older = 'logits_processor_args = {"label": label, "label_mask": label_mask}'  # before #3600 (2025-10-13)
    assert family.processor_arguments(_forward_step(older)) == {"label", "label_mask"}
    built = 'logits_processor_args = {"label": label, "temperature": t, "loss_mask": m}'
    assert family.processor_arguments(_forward_step(built)) == {"label", "temperature", "loss_mask"}
    with pytest.raises(MissingUpstream, match="'routing'"):
        family.processor_arguments(_forward_step('logits_processor_args = {"label": label, "routing": r}'))


def test_the_loss_mask_marks_the_positions_that_predict_response_tokens():
    inputs = PackedInputs([torch.arange(5), torch.arange(3)], [5, 3], [2, 1], [torch.ones(2), torch.ones(1)], "thd", 1)
    masks = verl_engine.response_positions(inputs, "cpu").unbind()
    assert [m.tolist() for m in masks] == [[False, False, True, True, False], [False, True, False]]
