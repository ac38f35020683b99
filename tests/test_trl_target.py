"""The TRL adapters' seams, on the stand-in package ``tests/fakes/trl`` (no network, no TRL, no transformers).

The stand-in keeps TRL's file layout, names and imports (a ``trainer/utils.py``
that imports pandas and transformers at its top, kernels that import
``transformers.utils`` and, in backward, ``..trainer.utils``) with plain torch
arithmetic. The adapters must load only what they call, map targets,
temperature and the entropy gate, gather the vocabulary at TP > 1, and pass
parity; a stand-in with NeMo's entropy sign must fail it.
"""

import pytest
import torch

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.checks.hidden import check_hidden_backward, check_hidden_forward
from harness.checks.parity import check_token_backward, check_token_forward
from harness.targets import load_target
from harness.targets.trl import loading
from harness.targets.trl.token import TRLTokenTarget
from tests.fakes.reach_targets import HERE

SPEC, TRITON = "tests/fakes/reach_targets.py:TRL", "tests/fakes/reach_targets.py:TRLTriton"
CASES = [
    Case(seed=1, vocab=12, samples=((6, 4),), temperature=0.7, with_entropy=True),
    Case(seed=2, vocab=16, tp=2, samples=((5, 3),), with_entropy=True),
    Case(seed=3, vocab=10, samples=((4, 2),), dtype="bfloat16", with_entropy=False),
]


def test_declares_what_trl_has():
    target = load_target(SPEC)
    assert target.name == "trl-1.0.0+stand-in"
    assert target.capabilities == {"token", "entropy", "temperature", "hidden"}  # entropy_gate: token path only
    assert load_target(TRITON).capabilities == {"token", "entropy", "temperature"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}-{c.dtype}-t{c.temperature}")
def test_token_helpers_pass_parity(case):
    check_token_forward(case, SPEC)
    check_token_backward(case, SPEC)


def test_triton_kernel_module_passes_parity():
    check_token_forward(CASES[0], TRITON)


def test_entropy_gate_is_trls_entropy_requires_grad():
    logits, targets = torch.randn(4, 6, requires_grad=True), torch.tensor([0, 5, 2, 1])
    options = {"tp_group": None, "chunk_size": None, "with_entropy": True, "temperature": 1.0}
    target = TRLTokenTarget(HERE / "trl")
    assert "entropy_gate" in target.capabilities
    _, gated = target.token_log_probs(logits, targets, entropy_grad=False, **options)
    _, live = target.token_log_probs(logits, targets, entropy_grad=True, **options)
    assert not gated.requires_grad and live.requires_grad


def test_chunked_lm_head_passes_parity_with_entropy_gradient():
    """The stand-in's vocabulary tile (5) is below V, so TRL's chunk default read from utils.py is what tiles."""
    case = with_hidden_size(Case(seed=4, vocab=12, samples=((7, 4),), temperature=1.3, with_entropy=True), 5)
    assert loading.chunk_default(HERE / "trl") == 5
    check_hidden_forward(case, SPEC)
    check_hidden_backward(case, SPEC)


def test_only_the_named_functions_are_taken_from_utils(tmp_path):
    """utils.py imports pandas and transformers (absent here): only the defs run, and a missing one is named."""
    namespace = loading.utils_functions(HERE / "trl")
    assert namespace.selective_log_softmax.__code__.co_filename.endswith("trl/trainer/utils.py")
    broken = tmp_path / "trl" / "trainer"
    broken.mkdir(parents=True)
    (broken / "utils.py").write_text("def selective_log_softmax(logits, index):\n    return logits\n")
    with pytest.raises(AttributeError, match="entropy_from_logits"):
        loading._run_definitions(broken / "utils.py", loading.UTILS_FUNCTIONS, {})


def test_a_wrong_entropy_sign_fails_parity(tmp_path):
    """NeMo's convention (sum p log p) in TRL's entropy_from_logits: the forward check must catch it."""
    import shutil

    root = tmp_path / "trl_wrong_sign"
    shutil.copytree(HERE / "trl", root)
    utils = root / "trl" / "trainer" / "utils.py"
    text = utils.read_text()
    assert "return -(log_p.exp() * log_p).sum(-1)" in text
    utils.write_text(text.replace("return -(log_p.exp() * log_p).sum(-1)", "return (log_p.exp() * log_p).sum(-1)"))
    adapter = tmp_path / "adapter.py"
    adapter.write_text(
        "from harness.targets.trl.token import TRLTokenTarget\n\n"
        f"class T(TRLTokenTarget):\n    def __init__(self):\n        super().__init__(root={str(root)!r})\n"
    )
    with pytest.raises(AssertionError, match="entropy"):
        check_token_forward(CASES[0], f"{adapter}:T")


OLD_UTILS = """import pandas  # noqa: F401  (never executed by the adapter)
import torch
import torch.nn.functional as F


def selective_log_softmax(logits, index):
    return logits.log_softmax(-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
"""
OLD_ENTROPY = """

def entropy_from_logits(logits, chunk_size=1):
    log_p = F.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)
"""


def _older_release(tmp_path, *, entropy: bool):
    """A stand-in TRL release before 1.14: no kernels, no fused helper, the two helpers of its time."""
    root = tmp_path / f"trl_old_{entropy}"
    (root / "trl" / "trainer").mkdir(parents=True)
    (root / "trl" / "trainer" / "utils.py").write_text(OLD_UTILS + (OLD_ENTROPY if entropy else ""))
    return root


def test_an_older_release_is_the_token_path_alone_composed_as_its_trainer_did(tmp_path):
    """A release replay loads TRL < 1.15 (no chunked LM head) and < 1.14 (no fused helper): token path, no gate."""
    old_root, older_root = _older_release(tmp_path, entropy=True), _older_release(tmp_path, entropy=False)
    adapter = tmp_path / "adapter.py"
    adapter.write_text(
        "from harness.targets.trl.family import TRLFamilyTarget\n\n"
        "class Old(TRLFamilyTarget):\n"
        f"    def __init__(self):\n        super().__init__({str(old_root)!r})\n\n"
        "class Older(TRLFamilyTarget):\n"
        f"    def __init__(self):\n        super().__init__({str(older_root)!r})\n"
    )
    old = load_target(f"{adapter}:Old")
    assert old.capabilities == {"token", "entropy", "temperature"} and old.hidden is None
    assert load_target(f"{adapter}:Older").capabilities == {"token", "temperature"}
    check_token_forward(CASES[0], f"{adapter}:Old")
    check_token_backward(CASES[0], f"{adapter}:Old")
    check_token_forward(CASES[2], f"{adapter}:Older")


def test_spec_installs_the_pypi_distribution_and_names_its_directory():
    from harness.gate import specs

    resolved = specs.resolve("trl==9.9.9")
    assert resolved.family == "trl" and resolved.pip_requirement == "trl==9.9.9"
    assert resolved.env == {"LPH_TRL_PATH": str(specs.PACKAGES / "trl-9.9.9")}
