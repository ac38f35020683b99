"""The Liger record's seams, on the stand-in package ``tests/fakes/liger`` (no network, no Liger, no Triton).

The stand-in has Liger's three Functions with their signatures and return
tuples in plain torch; like Liger's, its one-rank cross entropy writes the
logits' gradient into its input in forward. The family target must carry
the vocab-parallel token path (Liger's own ``tp_group``) and the hidden path;
the one-rank target must gather at TP > 1 and keep the caller's logits intact;
a Function whose composition loses the rank's offset fails, because Liger's
Function is what runs.
"""

import shutil

import pytest
import torch

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.checks.forward_only import check_hidden_forward_only, check_token_forward_only
from harness.checks.hidden import check_hidden_backward, check_hidden_forward
from harness.checks.parity import check_token_backward, check_token_forward
from harness.targets import load_target
from harness.targets.upstream.loader import MissingUpstream
from tests.fakes.reach_targets import HERE

FAMILY, ONE_RANK = f"liger={HERE / 'liger'}", "tests/fakes/reach_targets.py:LigerOneRank"
HIDDEN_CASE = with_hidden_size(Case(seed=3, vocab=10, samples=((5, 3),), with_entropy=False), 4)
CASES = [
    Case(seed=1, vocab=12, samples=((6, 4),), with_entropy=False),
    Case(seed=2, vocab=16, tp=2, samples=((5, 3),), with_entropy=False),
]


def test_declares_token_and_hidden_only():
    """Its vocab-parallel Function sees the TP group; the one-rank Function runs behind the gather, and says so."""
    assert load_target(FAMILY).name == "liger-0.0.0+stand-in"
    assert load_target(FAMILY).capabilities == {"token", "hidden", "vocab_parallel"}
    assert load_target(ONE_RANK).capabilities == {"token"} and "vocab_parallel" in load_target(ONE_RANK).not_declared
    assert set(load_target(FAMILY).executed) == {
        "liger_kernel/ops/vocab_parallel_cross_entropy.py",
        "liger_kernel/ops/fused_linear_cross_entropy.py",
    }


@pytest.mark.parametrize("spec", [FAMILY, ONE_RANK], ids=("vocab-parallel", "one-rank"))
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}")
def test_token_paths_pass_parity(spec, case):
    """At tp=2 the vocab-parallel path runs its own collectives, the one-rank path the adapter's gather."""
    check_token_forward(case, spec)
    check_token_backward(case, spec)


def test_one_rank_cross_entropy_leaves_the_callers_logits_alone():
    logits = torch.randn(4, 6, requires_grad=True)
    before = logits.detach().clone()
    options = {"tp_group": None, "chunk_size": None, "with_entropy": False, "entropy_grad": False, "temperature": 1.0}
    load_target(ONE_RANK).token_log_probs(logits, torch.tensor([0, 5, 2, 1]), **options)
    assert torch.equal(logits.detach(), before)


def test_family_hidden_path_is_the_fused_linear_function():
    check_hidden_forward(HIDDEN_CASE, FAMILY)
    check_hidden_backward(HIDDEN_CASE, FAMILY)


def test_forward_only_on_every_entry_point():
    check_token_forward_only(CASES[1], FAMILY)
    check_token_forward_only(CASES[1], ONE_RANK)
    check_hidden_forward_only(HIDDEN_CASE, FAMILY)


def test_a_revision_without_a_function_is_an_error_naming_it(tmp_path):
    root = tmp_path / "liger"
    shutil.copytree(HERE / "liger", root)
    (root / "liger_kernel" / "ops" / "fused_linear_cross_entropy.py").unlink()
    with pytest.raises(MissingUpstream, match="LigerFusedLinearCrossEntropyFunction in liger_kernel/ops/fused_linear"):
        load_target(f"liger={root}")


def test_a_release_before_the_vocab_parallel_function_checks_its_hidden_path(tmp_path):
    """Releases before 0.8.1 have the fused linear Function but not the vocab-parallel one: they load with the
    hidden path (the token path not declared, saying when it arrived), so a history checks them, never an ERROR."""
    root = tmp_path / "liger"
    shutil.copytree(HERE / "liger", root)
    (root / "liger_kernel" / "ops" / "vocab_parallel_cross_entropy.py").unlink()
    target = load_target(f"liger={root}")
    assert target.capabilities == {"hidden"} and "0.8.1" in target.not_declared["token_log_probs"]
    check_hidden_forward(HIDDEN_CASE, f"liger={root}")


def test_a_shard_offset_bug_fails_parity(tmp_path):
    """The stand-in's vocab-parallel Function with rank 0's offset on every rank: tp=2 parity must fail."""
    root = tmp_path / "liger"
    shutil.copytree(HERE / "liger", root)
    ops = root / "liger_kernel" / "ops" / "vocab_parallel_cross_entropy.py"
    text = ops.read_text()
    assert "local = target - rank * x.shape[-1]" in text
    ops.write_text(text.replace("local = target - rank * x.shape[-1]", "local = target"))
    with pytest.raises(AssertionError, match="log_probs"):
        check_token_forward(CASES[1], f"liger={root}")


def test_spec_installs_the_pypi_distribution_and_names_its_directory():
    from harness.gate import specs

    resolved = specs.resolve("liger==9.9.9")
    assert resolved.family == "liger" and resolved.pip_requirement == "liger-kernel==9.9.9"
    assert resolved.env == {"LPH_LIGER_PATH": str(specs.PACKAGES / "liger-9.9.9")}
