"""Self-tests of the slime adapter on the miles layout (radixark/miles), on a stand-in checkout: no network.

The stand-in under tests/fakes/miles/ follows miles' signatures (package
``miles``, loss code in ``loss_hub/``, groups from its own parallel state, the
entropy gate as ``entropy_requires_grad``) with a plain torch implementation.
These tests exercise the seams the fork changed: layout detection from the
checkout's files, loading the moved modules, setting miles' parallel state,
the packed path's gate argument, the policy loss importing the packed entry
point under its own name, and the gate regression failing on an inverted gate.
"""

import shutil
import sys

import pytest

from harness.cases.case import Case
from harness.checks.invariances import check_gate_invariance
from harness.checks.parity import check_packed_backward, check_packed_forward, check_token_backward, check_token_forward
from harness.checks.policy import check_policy_loss
from harness.gate import history, specs
from harness.targets.slime import api
from harness.targets.slime.adapter import MILES_PATH_VARIABLE, MilesTarget, SlimeTarget, slime_root
from tests.fakes.miles import targets as fakes
from tests.fakes.slime import targets as slime_fakes

HUB = f"{fakes.__file__}:hub"
CASE = Case(seed=5, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=3, mask_mode="mixed", temperature=0.7)
GATE_CASE = Case(seed=21, vocab=16, samples=((8, 6), (4, 2)), entropy_coef=0.01)


def _under(package: str) -> list[str]:
    return [name for name in sys.modules if name == package or name.startswith(f"{package}.")]


def test_layout_is_detected_from_the_checkout_files(tmp_path):
    assert api.layout_of(fakes.HERE / "hub").package == "miles"
    assert api.layout_of(slime_fakes.HERE / "fused").package == "slime"
    assert api.layout_of(tmp_path) is None
    with pytest.raises(FileNotFoundError, match="miles/backends/training_utils/loss_hub/math_utils.py"):
        slime_root(tmp_path, MILES_PATH_VARIABLE)


def test_checkout_comes_from_its_own_variable(monkeypatch):
    monkeypatch.setenv(MILES_PATH_VARIABLE, str(fakes.HERE / "hub"))
    target = MilesTarget()
    assert target.name == "miles"  # no .git in the stand-in
    assert target.api.layout.package == "miles"
    assert not _under("miles"), "loading must leave no miles modules behind"


def test_capabilities_follow_the_fork():
    target = fakes.hub()
    assert target.capabilities == {
        "token",
        "entropy",
        "packed",
        "policy_loss",
        "temperature",
        "chunking",
        "entropy_gate",
    }
    assert target.api.token_gate_parameter == "entropy_requires_grad"
    assert api.PACKED_GATE_PARAMETER in target.api.packed_parameters


def test_values_through_the_moved_modules():
    check_token_forward(CASE.with_(samples=((9, 4),), temperature=2.5), HUB)
    check_token_backward(CASE.with_(samples=((9, 4),), temperature=2.5), HUB)
    check_packed_forward(CASE, HUB)
    check_packed_backward(CASE, HUB)
    check_policy_loss(CASE.with_(entropy_coef=-0.5), HUB)


def test_gate_regression_passes_on_the_right_gate():
    for coef in (0.0, 0.01):
        check_policy_loss(GATE_CASE.with_(entropy_coef=coef), HUB)
    check_gate_invariance(GATE_CASE, HUB)


def test_gate_regression_fails_on_an_inverted_gate(tmp_path):
    tree = tmp_path / "inverted"
    shutil.copytree(fakes.HERE / "hub", tree)
    losses = tree / "miles/backends/training_utils/loss_hub/losses.py"
    text = losses.read_text()
    assert "entropy_requires_grad=args.entropy_coef != 0" in text
    losses.write_text(
        text.replace("entropy_requires_grad=args.entropy_coef != 0", "entropy_requires_grad=args.entropy_coef == 0")
    )
    spec = f"{tmp_path / 'inverted_target.py'}:inverted"
    (tmp_path / "inverted_target.py").write_text(
        "from harness.targets.slime.adapter import MilesTarget\n\n\n"
        f"def inverted():\n    return MilesTarget({str(tree)!r})\n"
    )
    with pytest.raises(AssertionError, match="grad"):
        check_policy_loss(GATE_CASE, spec)


def test_gate_and_history_know_the_family():
    resolved = specs.resolve(f"miles={fakes.HERE / 'hub'}")
    assert resolved.family == "miles" and resolved.target.endswith(":MilesTarget")
    assert resolved.env == {MILES_PATH_VARIABLE: str((fakes.HERE / "hub").resolve())}
    assert history.files_under_test("miles") == api.LAYOUTS[1].files()
    # slime's replay keys are unchanged: the same three files in the same order.
    assert SlimeTarget.files_under_test == (
        "slime/utils/ppo_utils.py",
        "slime/backends/megatron_utils/loss.py",
        "slime/backends/megatron_utils/cp_utils.py",
    )
