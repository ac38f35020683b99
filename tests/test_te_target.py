"""The TransformerEngine record's seams, on ``tests/fakes/transformer_engine`` (no TE, no CUDA, no Triton).

The stand-in keeps TE's three files, their imports (``transformer_engine.*``
absolute imports, ``pytorch.jit.no_torch_dynamo``) and package ``__init__``
files that raise if executed; its ``parallel_cross_entropy`` refuses CPU
tensors as TE's does. The record must execute the three files alone, pass the
TP group as TE's ``dist_process_group`` and call the Function on the CPU; a
launcher that loses its rank's offset fails, because TE's launchers are what run.
"""

import shutil

import pytest

from harness.cases.case import Case
from harness.checks.forward_only import check_token_forward_only
from harness.checks.parity import check_token_backward, check_token_forward
from harness.targets import load_target
from harness.targets.upstream.loader import MissingUpstream
from tests.fakes.reach_targets import HERE

SPEC = f"te={HERE / 'transformer_engine'}"
LAUNCHERS = "transformer_engine/pytorch/triton/cross_entropy.py"
CASES = [
    Case(seed=1, vocab=12, samples=((6, 4),), with_entropy=False),
    Case(seed=2, vocab=16, tp=2, samples=((5, 3),), with_entropy=False),
    Case(seed=3, vocab=8, tp=2, samples=((4, 2),), dtype="bfloat16", with_entropy=False),
]


def test_declares_token_only():
    target = load_target(SPEC)
    assert target.name == "te-0.0.0+stand-in"
    assert target.capabilities == {"token", "vocab_parallel"}
    assert "entropy" in target.not_declared and "temperature" in target.not_declared


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}-{c.dtype}")
def test_passes_parity_through_its_process_group(case):
    check_token_forward(case, SPEC)
    check_token_backward(case, SPEC)


def test_forward_only():
    check_token_forward_only(CASES[1], SPEC)


def test_a_lost_rank_offset_fails_parity(tmp_path):
    """TE's launcher with every rank believing it holds the first shard: tp=2 parity must fail."""
    root = tmp_path / "te"
    shutil.copytree(HERE / "transformer_engine", root)
    launchers = root / LAUNCHERS
    text = launchers.read_text()
    assert "row_statistics(x, target.reshape(-1), rank * x.shape[-1])" in text
    launchers.write_text(text.replace("rank * x.shape[-1])", "0)"))
    with pytest.raises(AssertionError, match="log_probs"):
        check_token_forward(CASES[1], f"te={root}")


def test_loads_the_layout_before_2_10(tmp_path):
    """Before TE 2.10 the kernels lived in the launchers' file (no ``common/triton``); before 2.7 the Function took
    six arguments (no ``is_cg_capturable``): the adapter loads and passes parity there too (history replays)."""
    root = tmp_path / "te"
    shutil.copytree(HERE / "transformer_engine", root)
    kernels = root / "transformer_engine/common/triton/cross_entropy.py"
    launchers = root / LAUNCHERS
    imported = "from transformer_engine.common.triton.cross_entropy import row_statistics\n"
    assert imported in launchers.read_text()
    launchers.write_text(launchers.read_text().replace(imported, kernels.read_text().split('"""', 2)[2]))
    kernels.unlink()
    function = root / "transformer_engine/pytorch/cross_entropy.py"
    text = function.read_text()
    assert "ignore_idx=-100,\n                overwrite_input=False):" in text
    text = text.replace("ignore_idx=-100,\n                overwrite_input=False):", "ignore_idx=-100):")
    function.write_text(text.replace("ignore_idx, overwrite_input\n", "ignore_idx, False\n"))
    old = load_target(f"te={root}")
    assert "transformer_engine/common/triton/cross_entropy.py" not in old.executed
    check_token_forward(CASES[1], f"te={root}")
    check_token_backward(CASES[1], f"te={root}")


def test_records_the_files_it_executed():
    """What a history keys TE's revisions by: the three files, the kernels' found through the launchers' import."""
    assert set(load_target(SPEC).executed) == {
        "transformer_engine/common/triton/cross_entropy.py",
        "transformer_engine/pytorch/triton/cross_entropy.py",
        "transformer_engine/pytorch/cross_entropy.py",
    }


def test_a_revision_without_the_function_is_an_error_naming_it(tmp_path):
    root = tmp_path / "te"
    shutil.copytree(HERE / "transformer_engine", root)
    function = root / "transformer_engine/pytorch/cross_entropy.py"
    function.write_text(function.read_text().replace("def parallel_cross_entropy(", "def renamed_cross_entropy("))
    with pytest.raises(MissingUpstream, match="parallel_cross_entropy in transformer_engine/pytorch/cross_entropy.py"):
        load_target(f"te={root}")


def test_spec_installs_the_pypi_distribution_and_names_its_directory():
    from harness.gate import specs

    resolved = specs.resolve("te==9.9.9")
    assert resolved.family == "te" and resolved.pip_requirement == "transformer-engine==9.9.9"
    assert resolved.env == {"LPH_TE_PATH": str(specs.PACKAGES / "te-9.9.9")}
