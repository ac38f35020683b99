"""The TRL record's seams, on the stand-in package ``tests/fakes/trl`` (no network, no TRL, no transformers).

The stand-in keeps TRL's file layout, names and imports (a ``trainer/utils.py``
that imports pandas and transformers at its top, kernels that import
``transformers.utils`` and, in backward, ``..trainer.utils``) with plain torch
arithmetic. The record must load only what it calls, map targets, temperature
and the entropy gate, gather the vocabulary at TP > 1, and pass parity; a
helper with NeMo's entropy sign, or a composition that leaves out its
temperature division, must fail it, because TRL's composition is what runs.
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
from tests.test_trl_policy import OPTIONS as POLICY_OPTIONS

ROOT = HERE / "trl"
SPEC, TRITON = f"trl={ROOT}", "tests/fakes/reach_targets.py:TRLTriton"
CASES = [
    Case(seed=1, vocab=12, samples=((6, 4),), temperature=0.7, with_entropy=True),
    Case(seed=2, vocab=16, tp=2, samples=((5, 3),), with_entropy=True),
    Case(seed=3, vocab=10, samples=((4, 2),), dtype="bfloat16", with_entropy=False),
]
# The stand-in's vocabulary tile (5) is below V, so TRL's own chunk default is what tiles.
HIDDEN_CASE = with_hidden_size(Case(seed=4, vocab=12, samples=((7, 4),), temperature=1.3, with_entropy=True), 5)


def _changed_utils(tmp_path, old: str, new: str) -> str:
    """A copy of the stand-in whose ``trainer/utils.py`` has ``old`` (which must be there) replaced by ``new``."""
    root = tmp_path / "trl"
    shutil.copytree(ROOT, root)
    utils = root / "trl" / "trainer" / "utils.py"
    text = utils.read_text()
    assert old in text
    utils.write_text(text.replace(old, new))
    return f"trl={root}"


def test_declares_what_trl_has():
    target = load_target(SPEC)
    assert target.name == "trl-1.0.0+stand-in"
    assert target.capabilities == {
        "token",
        "entropy",
        "entropy_gate",
        "temperature",
        "hidden",
        "token_policy_loss",
        *POLICY_OPTIONS,
    }
    assert "entropy_gate" not in target.capabilities_for({"hidden"})  # the chunked Function has no switch
    assert load_target(TRITON).capabilities == {"token", "entropy", "temperature"}


def test_records_the_files_it_executed_or_read():
    assert set(load_target(SPEC).executed) >= {
        "trl/trainer/utils.py",
        "trl/trainer/grpo_trainer.py",
        "trl/trainer/grpo_config.py",
        "trl/kernels/chunked_logprob.py",
        "trl/kernels/logprob_entropy.py",
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}-{c.dtype}-t{c.temperature}")
def test_token_helpers_pass_parity(case):
    check_token_forward(case, SPEC)
    check_token_backward(case, SPEC)


def test_triton_kernel_module_passes_parity():
    check_token_forward(CASES[0], TRITON)


def test_forward_only_on_every_entry_point():
    check_token_forward_only(CASES[0], SPEC)
    check_token_forward_only(CASES[1], SPEC)
    check_hidden_forward_only(HIDDEN_CASE, SPEC)


def test_entropy_gate_is_trls_entropy_requires_grad():
    logits, targets = torch.randn(4, 6, requires_grad=True), torch.tensor([0, 5, 2, 1])
    options = {"tp_group": None, "chunk_size": None, "with_entropy": True, "temperature": 1.0}
    target = load_target(SPEC)
    _, gated = target.token_log_probs(logits, targets, entropy_grad=False, **options)
    _, live = target.token_log_probs(logits, targets, entropy_grad=True, **options)
    assert not gated.requires_grad and live.requires_grad


def test_chunked_lm_head_passes_parity_with_entropy_gradient():
    check_hidden_forward(HIDDEN_CASE, SPEC)
    check_hidden_backward(HIDDEN_CASE, SPEC)


def test_a_wrong_entropy_sign_fails_parity(tmp_path):
    """NeMo's convention (sum p log p) in TRL's entropy_from_logits: the forward check must catch it."""
    spec = _changed_utils(tmp_path, "return -(log_p.exp() * log_p).sum(-1)", "return (log_p.exp() * log_p).sum(-1)")
    with pytest.raises(AssertionError, match="entropy"):
        check_token_forward(CASES[0], spec)


def test_a_composition_that_leaves_out_its_temperature_division_fails(tmp_path):
    """The division is selective_log_softmax_and_entropy's step, never the record's: leaving it out fails."""
    step = "    if temperature != 1.0:\n        logits = logits / temperature\n    logprobs = "
    spec = _changed_utils(tmp_path, step, "    logprobs = ")
    check_token_forward(CASES[0], SPEC)
    with pytest.raises(AssertionError, match="log_probs|entropy"):
        check_token_forward(CASES[0], spec)


def test_a_fused_forward_that_leaves_out_its_temperature_fails(tmp_path):
    """The temperature reaches the chunked Function through add_fused_lm_head, never through the record."""
    chunk = "                _CHUNKED_LOGPROB_CHUNK_SIZE,\n"
    spec = _changed_utils(tmp_path, f"                temperature,\n{chunk}", f"                1.0,\n{chunk}")
    with pytest.raises(AssertionError, match="log_probs|entropy"):
        check_hidden_forward(HIDDEN_CASE, spec)


def test_a_revision_without_the_helpers_is_an_error_naming_them(tmp_path):
    spec = _changed_utils(tmp_path, "def selective_log_softmax(", "def renamed_log_softmax(")
    with pytest.raises(MissingUpstream, match="selective_log_softmax in trl/trainer/utils.py"):
        load_target(spec)


OLD_UTILS = """import pandas  # noqa: F401  (never executed by the record)
import torch
import torch.nn.functional as F


def selective_log_softmax(logits, index):
    return logits.log_softmax(-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def nanmin(tensor):
    return tensor[~torch.isnan(tensor)].min()


def nanmax(tensor):
    return tensor[~torch.isnan(tensor)].max()
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
    shutil.copy(ROOT / "trl" / "trainer" / "grpo_trainer.py", root / "trl" / "trainer" / "grpo_trainer.py")
    return root


def test_an_older_release_is_its_helpers_each_as_it_is(tmp_path):
    """TRL < 1.15 has no chunked LM head (not declared, with the reason), < 1.14 no fused helper: the older token
    entry calls each helper as it is, so neither its trainer's temperature division nor its gate is declared."""
    old, older = _older_release(tmp_path, entropy=True), _older_release(tmp_path, entropy=False)
    target = load_target(f"trl={old}")
    assert target.capabilities == {"token", "entropy", "token_policy_loss"}
    assert "1.15" in target.not_declared["hidden_log_probs"]
    assert load_target(f"trl={older}").capabilities == {"token", "token_policy_loss"}
    check_token_forward(CASES[1], f"trl={old}")
    check_token_backward(CASES[1], f"trl={old}")
    check_token_forward(CASES[2], f"trl={older}")


OLDER_TRANSFORMERS = (  # 0.18's class body: append to the older transformers' own list
    '    if version.parse(transformers.__version__) <= version.parse("4.50.3"):\n'
    "        from transformers.training_args import _VALID_DICT_FIELDS\n\n"
    '        _VALID_DICT_FIELDS.append("model_init_kwargs")\n'
    "    else:\n    "
)


@pytest.mark.parametrize(
    "gate",
    [OLDER_TRANSFORMERS, '    if version.parse(transformers.__version__) >= version.parse("4.51.0"):\n    '],
    ids=["0.18", "0.19-0.20"],
)
def test_a_release_whose_config_body_reads_the_transformers_version_loads(tmp_path, gate):
    """TRL 0.18-0.20's GRPOConfig compares ``transformers.__version__`` in its class body: the placeholder has one
    recent enough that each takes its newer branch (the base's list, which the stand-in base holds), so those
    releases load instead of reading as an adapter ERROR (no __version__; 0.18 appending to an absent module)."""
    root = tmp_path / "trl"
    shutil.copytree(ROOT, root)
    config = root / "trl" / "trainer" / "grpo_config.py"
    text = config.read_text()
    field = '    _VALID_DICT_FIELDS = _BaseConfig._VALID_DICT_FIELDS + ["model_init_kwargs"]\n'
    assert field in text
    gated = gate + field
    imports = "import transformers\nfrom packaging import version\n\n"
    config.write_text(imports + text.replace(field, gated))
    assert load_target(f"trl={root}").capabilities == load_target(SPEC).capabilities
    check_token_forward(CASES[0], f"trl={root}")


def test_a_release_whose_config_base_is_named_baseconfig_loads(tmp_path):
    """TRL 0.29 names its config's base ``BaseConfig`` (``_BaseConfig`` from 1.0): both are that base's older and
    newer form, so 0.29 loads instead of reading as an adapter ERROR (a relative import of the absent name)."""
    root = tmp_path / "trl"
    shutil.copytree(ROOT, root)
    for name in ("base_config.py", "grpo_config.py"):
        path = root / "trl" / "trainer" / name
        path.write_text(path.read_text().replace("_BaseConfig", "BaseConfig"))
    assert load_target(f"trl={root}").capabilities == load_target(SPEC).capabilities


def test_spec_installs_the_pypi_distribution_and_names_its_directory():
    from harness.gate import specs

    resolved = specs.resolve("trl==9.9.9")
    assert resolved.family == "trl" and resolved.pip_requirement == "trl==9.9.9"
    assert resolved.env == {"LPH_TRL_PATH": str(specs.PACKAGES / "trl-9.9.9")}
