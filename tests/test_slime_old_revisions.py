"""slime checkouts of mid-2025: the policy loss under its first name, and a missing import as a named ERROR.

Built from the gateless stand-in checkout (tests/fakes/slime/gateless) in a
temporary directory, changed the way the 2025-06 revisions differ.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cases.case import Case
from harness.checks.policy import check_policy_loss
from harness.targets.slime.adapter import SlimeTarget
from harness.targets.upstream.symbols import MissingUpstreamImport

GATELESS = Path(__file__).parent / "fakes" / "slime" / "gateless"
LOSS = Path("slime/backends/megatron_utils/loss.py")

# The first revisions' form: the loss function builds its own sample mean and returns (loss / cp_size, n, metrics).
LEGACY = """

def policy_loss_func(args, batch, num_microbatches, logits):
    from slime.backends.megatron_utils.cp_utils import get_sum_of_sample_mean

    mean = get_sum_of_sample_mean(batch["total_lengths"], batch["response_lengths"], batch["loss_masks"])
    loss, metrics = _policy_loss(args, batch, logits, mean)
    return loss / mpu.get_context_parallel_world_size(), 1, metrics
"""


def _checkout(tmp_path: Path, edit) -> Path:
    root = tmp_path / "slime-checkout"
    shutil.copytree(GATELESS, root)
    path = root / LOSS
    path.write_text(edit(path.read_text()))
    return root


def test_the_first_policy_loss_name_is_found_and_checked(tmp_path, monkeypatch):
    root = _checkout(tmp_path, lambda text: text.replace("def policy_loss_function(", "def _policy_loss(") + LEGACY)
    target = SlimeTarget(root)
    assert target.api.policy_fn is None and target.api.legacy_policy_fn is not None
    assert "policy_loss" in target.capabilities
    monkeypatch.setenv("LPH_SLIME_PATH", str(root))
    monkeypatch.setenv("LPH_ABLATION", "0")
    check_policy_loss(
        Case(seed=7, vocab=16, samples=((8, 6), (4, 2)), entropy_coef=0.01), "harness.targets.slime.adapter:SlimeTarget"
    )


def test_a_missing_import_names_the_module_and_the_stand_in(tmp_path):
    root = _checkout(tmp_path, lambda text: "import lph_absent_logging_package\n" + text)
    with pytest.raises(MissingUpstreamImport) as info:
        SlimeTarget(root)
    assert info.value.missing == "lph_absent_logging_package"
    assert "IMPORT_ONLY" in str(info.value) and "megatron_utils.loss" in str(info.value)
