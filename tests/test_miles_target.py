"""Self-tests of the miles record (harness/targets/slime/family.py: MILES), on a stand-in checkout: no network.

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
from harness.gate import specs
from harness.targets import load_target
from harness.targets.slime.family import MILES, SLIME
from harness.targets.upstream.family import parameters
from harness.targets.upstream.locate import find
from tests.fakes.miles import targets as fakes
from tests.fakes.slime import targets as slime_fakes

MILES_PATH_VARIABLE = MILES.locate.variable

HUB = f"{fakes.__file__}:hub"
CASE = Case(seed=5, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=3, mask_mode="mixed", temperature=0.7)
GATE_CASE = Case(seed=21, vocab=16, samples=((8, 6), (4, 2)), entropy_coef=0.01)


def _under(package: str) -> list[str]:
    return [name for name in sys.modules if name == package or name.startswith(f"{package}.")]


def test_each_family_finds_its_checkout_by_its_own_marker(tmp_path):
    assert find("miles", MILES.locate, fakes.HERE / "hub").root == (fakes.HERE / "hub").resolve()
    with pytest.raises(FileNotFoundError, match="miles/__init__.py"):
        find("miles", MILES.locate, slime_fakes.HERE / "fused")
    with pytest.raises(FileNotFoundError, match="slime/utils/ppo_utils.py"):
        find("slime", SLIME.locate, fakes.HERE / "hub")


def test_checkout_comes_from_its_own_variable(monkeypatch):
    monkeypatch.setenv(MILES_PATH_VARIABLE, str(fakes.HERE / "hub"))
    target = MILES.target()
    assert target.name == "miles"  # no .git in the stand-in
    assert target.up.modules["policy"].__name__ == "miles.backends.training_utils.loss_hub.losses"
    assert not _under("miles"), "loading must leave no miles modules behind"


def test_capabilities_follow_the_fork():
    target = fakes.hub()
    # bshd: its get_log_probs_and_entropy takes max_seq_lens; token-sum: its get_sum_of_sample_mean takes
    # calculate_per_token_loss (declared means present).
    assert target.capabilities == {
        "policy_agg_token-sum",
        "token",
        "entropy",
        "packed",
        "policy_loss",
        "temperature",
        "chunking",
        "entropy_gate",
        "bshd",
        "vocab_parallel",
    }
    assert "entropy_requires_grad" in parameters(target.up.calculate_log_probs_and_entropy)
    assert "entropy_requires_grad" in parameters(target.up.get_log_probs_and_entropy)
    assert "policy_dual_clip" in target.not_declared  # miles' options are not mapped yet, and say so


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
    with pytest.raises(AssertionError, match="grad"):
        check_policy_loss(GATE_CASE, f"miles={tree}")


def test_a_loss_that_computes_no_entropy_at_coefficient_zero_fails_that_output_only(tmp_path):
    """miles before #1464 computed the entropy only for the bonus (``with_entropy=args.entropy_coef != 0``): asked
    for it at coefficient 0, the policy check FAILs the entropy output and its flags (a LAYOUT failure, not a crash
    of the check), and still judges the loss and its gradient."""
    from harness.checks.failure import facts_of

    tree = tmp_path / "unobserved"
    shutil.copytree(fakes.HERE / "hub", tree)
    losses = tree / "miles/backends/training_utils/loss_hub/losses.py"
    text = losses.read_text()
    assert " or args.observe_training_entropy" in text
    losses.write_text(text.replace(" or args.observe_training_entropy", ""))
    spec = f"miles={tree}"
    check_policy_loss(GATE_CASE, spec)  # coefficient 0.01: the entropy is computed
    with pytest.raises(AssertionError, match="entropy was requested but not returned") as raised:
        check_policy_loss(GATE_CASE.with_(entropy_coef=0.0), spec)
    outcomes = {output: entry["outcome"] for output, entry in facts_of(raised.value).subtests.items()}
    assert outcomes["entropy"] == outcomes["graph"] == "FAIL"
    assert outcomes["loss"] == outcomes["grad(logits)"] == "PASS"


def test_gate_and_history_know_the_family():
    resolved = specs.resolve(f"miles={fakes.HERE / 'hub'}")
    assert resolved.family == "miles" and resolved.run_as == f"miles={(fakes.HERE / 'hub').resolve()}"
    assert resolved.env == {MILES_PATH_VARIABLE: str((fakes.HERE / "hub").resolve())}
    # A replay keys the revision by the files the loader executed, the moved modules included.
    assert load_target(resolved.run_as).executed == (
        "miles/backends/training_utils/cp_utils.py",
        "miles/backends/training_utils/loss_hub/logit_processors.py",
        "miles/backends/training_utils/loss_hub/losses.py",
        "miles/backends/training_utils/loss_hub/math_utils.py",
        "miles/backends/training_utils/parallel.py",
    )


def test_a_miles_checkout_in_slimes_older_layout_is_checked_there(tmp_path):
    """miles before the loss_hub (2025-10 to 2026-05) kept slime's layout under its own package: the record's older
    forms load it (groups through mpu where set_parallel_state is absent) and the checks run on it."""
    for path in (slime_fakes.HERE / "fused" / "slime").rglob("*.py"):
        copy = tmp_path / "miles" / path.relative_to(slime_fakes.HERE / "fused" / "slime")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text().replace("from slime.", "from miles."))
    (tmp_path / "miles" / "__init__.py").write_text("")
    assert {"token", "packed", "policy_loss"} <= load_target(f"miles={tmp_path}").capabilities
    check_packed_forward(CASE, f"miles={tmp_path}")


def test_a_miles_checkout_without_the_loss_hub_names_the_file_the_record_lacks(tmp_path):
    """A miles layout with neither the loss_hub nor the older forms is a load ERROR naming the missing files."""
    from harness.targets.upstream.loader import MissingUpstream

    (tmp_path / "miles").mkdir()
    (tmp_path / "miles" / "__init__.py").write_text("")
    with pytest.raises(MissingUpstream, match="nothing serves .*miles/backends/training_utils/loss_hub/"):
        load_target(f"miles={tmp_path}")
