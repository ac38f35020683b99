"""slime's older forms: the policy loss under its first name, the loss modules' stay in ``training_utils/``, a
missing layout file and a missing import as named ERRORs.

Built from the gateless stand-in checkout (tests/fakes/slime/gateless) in a
temporary directory, changed the way the revisions differ.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.cases.case import Case
from harness.checks.parity import check_packed_forward
from harness.checks.policy import check_policy_loss
from harness.targets.slime.family import SLIME
from harness.targets.upstream.family import parameters
from harness.targets.upstream.loader import MissingUpstream
from harness.targets.upstream.symbols import MissingUpstreamImport

GATELESS = Path(__file__).parent / "fakes" / "slime" / "gateless"
LOSS = Path("slime/backends/megatron_utils/loss.py")
CP_UTILS = Path("slime/backends/megatron_utils/cp_utils.py")
CASE = Case(seed=7, vocab=16, samples=((8, 6), (4, 2)), entropy_coef=0.01)

# The first revisions' form: the loss function builds its own sample mean and returns (loss / cp_size, n, metrics).
LEGACY = """

def policy_loss_func(args, batch, num_microbatches, logits):
    from slime.backends.megatron_utils.cp_utils import get_sum_of_sample_mean

    mean = get_sum_of_sample_mean(batch["total_lengths"], batch["response_lengths"], batch["loss_masks"])
    loss, metrics = _policy_loss(args, batch, logits, mean)
    return loss / mpu.get_context_parallel_world_size(), 1, metrics
"""


def _checkout(tmp_path: Path, edit=lambda text: text) -> Path:
    root = tmp_path / "slime-checkout"
    shutil.copytree(GATELESS, root)
    path = root / LOSS
    path.write_text(edit(path.read_text()))
    return root


def test_the_first_policy_loss_name_is_found_and_checked(tmp_path):
    root = _checkout(tmp_path, lambda text: text.replace("def policy_loss_function(", "def _policy_loss(") + LEGACY)
    target = SLIME.target(root)
    assert target.up.policy_loss_function is None and target.up.policy_loss_func is not None
    assert "policy_loss" in target.capabilities
    check_policy_loss(CASE, f"slime={root}")


def test_the_loss_modules_stay_in_training_utils_is_an_older_form_the_record_reaches(tmp_path):
    """slime #1373..#1442 kept loss.py and cp_utils.py in backends/training_utils/, the groups passed as a
    ``parallel_state`` argument: the record names that form, so the packed and policy checks run there too (they
    read UNSUPPORTED on those revisions before, which made #1442 look like a defect entering slime)."""
    root = _checkout(tmp_path)
    moved = root / "slime/backends/training_utils"
    moved.mkdir(parents=True)
    for name in (LOSS, CP_UTILS):
        text = (
            (root / name)
            .read_text()
            .replace(
                "def get_log_probs_and_entropy(\n    logits, *,",
                "def get_log_probs_and_entropy(\n    logits, *, parallel_state,",
            )
        )
        text = text.replace("def policy_loss_function(args,", "def policy_loss_function(args, parallel_state,")
        text = text.replace(
            "        logits,\n        args=args,",
            "        logits,\n        args=args,\n        parallel_state=parallel_state,",
        )
        (moved / name.name).write_text(text)
        (root / name).unlink()
    assert "parallel_state" in (moved / "loss.py").read_text()
    target = SLIME.target(root)
    assert "parallel_state" in parameters(target.up.get_log_probs_and_entropy)
    assert "parallel_state" in parameters(target.up.policy_loss_function)
    assert {"packed", "policy_loss"} <= target.capabilities
    assert "slime/backends/training_utils/loss.py" in target.executed
    check_packed_forward(CASE.with_(temperature=0.7), f"slime={root}")
    check_policy_loss(CASE, f"slime={root}")


def test_a_revision_without_the_files_the_record_names_is_an_error_naming_them(tmp_path):
    """Not a silent UNSUPPORTED: every form of the packed entry point's file is named."""
    root = _checkout(tmp_path)
    (root / LOSS).unlink()
    with pytest.raises(MissingUpstream) as info:
        SLIME.target(root)
    message = str(info.value)
    assert "get_log_probs_and_entropy" in message
    assert "slime/backends/megatron_utils/loss.py or slime/backends/training_utils/loss.py" in message


def test_a_missing_import_names_the_module_and_the_placeholder(tmp_path):
    root = _checkout(tmp_path, lambda text: "import lph_absent_logging_package\n" + text)
    with pytest.raises(MissingUpstreamImport) as info:
        SLIME.target(root)
    assert info.value.missing == "lph_absent_logging_package"
    assert "Placeholder" in str(info.value) and "megatron_utils.loss" in str(info.value)
