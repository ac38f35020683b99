"""The ms-swift adapter's seams, on ``tests/fakes/ms_swift`` and ``tests/fakes/megatron`` (no ms-swift, no Megatron).

The ms-swift stand-in imports ``from megatron.core import mpu, tensor_parallel``
as the real file does; the Megatron stand-in's cross entropy subtracts the row
max in place and its ``megatron/core/utils.py`` imports a CUDA-only module at
its top, so only the named helpers may be taken from it. The adapter must
answer mpu with the job's TP group, keep the caller's logits intact, and pass
parity with entropy at one and two ranks.
"""

import shutil

import pytest
import torch

from harness.cases.case import Case
from harness.checks.parity import check_token_backward, check_token_forward
from harness.targets import load_target
from tests.fakes.reach_targets import HERE

SPEC = "tests/fakes/reach_targets.py:MsSwift"
CASES = [
    Case(seed=1, vocab=12, samples=((6, 4),), temperature=0.8, with_entropy=True),
    Case(seed=2, vocab=16, tp=2, samples=((5, 3),), with_entropy=True),
]


def test_declares_what_its_utilities_have():
    assert load_target(SPEC).name == "ms-swift-0.0.0+stand-in"
    assert load_target(SPEC).capabilities == {"token", "entropy", "temperature"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}")
def test_passes_parity_with_entropy(case):
    check_token_forward(case, SPEC)
    check_token_backward(case, SPEC)


def test_megatron_in_place_shift_never_reaches_the_callers_logits():
    logits = torch.randn(4, 6, requires_grad=True)
    before = logits.detach().clone()
    options = {"tp_group": None, "chunk_size": None, "with_entropy": False, "entropy_grad": True, "temperature": 1.0}
    load_target(SPEC).token_log_probs(logits, torch.tensor([0, 5, 2, 1]), **options)
    assert torch.equal(logits.detach(), before)


def test_megatron_root_is_required_and_named(monkeypatch):
    from harness.targets.ms_swift import megatron_ce

    monkeypatch.delenv(megatron_ce.PATH_VARIABLE, raising=False)
    with pytest.raises(FileNotFoundError, match=megatron_ce.PATH_VARIABLE):
        megatron_ce.megatron_root()


def test_an_autograd_reduce_of_the_entropy_fails_the_gradient(tmp_path):
    """The reduction ms-swift's comment warns against (autograd-aware: tp times the gradient) must fail at tp=2."""
    root = tmp_path / "ms_swift"
    shutil.copytree(HERE / "ms_swift", root)
    utils = root / "swift" / "megatron" / "trainers" / "vocab_parallel_utils.py"
    text = utils.read_text()
    group = "group=mpu.get_tensor_model_parallel_group())"
    raw = f"        torch.distributed.all_reduce(partial, {group}\n        entropy = partial"
    assert raw in text
    utils.write_text(text.replace(raw, f"        entropy = torch.distributed.nn.all_reduce(partial, {group}"))
    adapter = tmp_path / "ms_swift_adapter.py"
    adapter.write_text(
        "from harness.targets.ms_swift.token import MsSwiftTarget\n"
        "from tests.fakes.reach_targets import HERE\n\n"
        "class T(MsSwiftTarget):\n    def __init__(self):\n"
        f"        super().__init__({str(root)!r}, HERE / 'megatron')\n"
    )
    check_token_forward(CASES[1], f"{adapter}:T")
    with pytest.raises(AssertionError, match="grad"):
        check_token_backward(CASES[1], f"{adapter}:T")


def test_spec_installs_the_pypi_distribution_and_names_its_directory():
    from harness.gate import specs

    resolved = specs.resolve("ms_swift==9.9.9")
    assert resolved.family == "ms_swift" and resolved.pip_requirement == "ms-swift==9.9.9"
    assert resolved.env == {"LPH_MS_SWIFT_PATH": str(specs.PACKAGES / "ms_swift-9.9.9")}
