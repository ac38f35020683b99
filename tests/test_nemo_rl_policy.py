"""NeMo-RL's policy loss in the family record, offline on the stand-in tree ``tests/fakes/nemo_rl/policy``.

The stand-in's ``ClippedPGLossFn`` imports absent packages (the trainer's
stack, pydantic's config) as the real module does: the record must load the
class alone, declare the options its ``ClippedPGLossConfig`` has (by its
fields, never by its source text), refuse the combinations it has no form for
(UNSUPPORTED, not run as something else) and pass the token-level checks; an
option present but not passed through, a KL whose log-probs lost their
gradient and an on-policy KL weight detached (NeMo-RL before #2506) FAIL,
because the loss that runs is the stand-in's.
"""

import shutil

import pytest

from harness.cases import policy
from harness.cases.case import Case
from harness.checks.token_policy import check_token_kl_term_gradient, check_token_policy_loss
from harness.targets import load_target
from tests.fakes.nemo_rl import targets as stand_ins

ROOT = stand_ins.HERE / "policy"
LOSS = "nemo_rl/algorithms/loss/loss_functions.py"
CASE = Case(seed=31, vocab=12, samples=((7, 4), (3, 0), (6, 5)), mask_mode="mixed")
SPEC = f"{stand_ins.__file__}:policy"


def _edited(tmp_path, path: str, old: str, new: str) -> str:
    """A copy of the stand-in tree with ``old`` replaced by ``new`` once in ``path``; its ``nemo_rl=`` spec."""
    root = tmp_path / "nemo"
    shutil.copytree(ROOT, root)
    shutil.copytree(stand_ins.HERE / "fixed", tmp_path / "fixed")  # the tree's model_utils executes its sibling's
    file = root / path
    text = file.read_text()
    assert old in text
    file.write_text(text.replace(old, new, 1))
    return f"nemo_rl={root}"


def test_declares_what_the_config_has():
    assert load_target(SPEC).capabilities >= {
        "token_policy_loss",
        "policy_agg_token-mean",
        "policy_agg_seq-mean-token-mean",
        "policy_dual_clip",
        "policy_cispo",
        *(f"policy_kl_{kind}" for kind in ("k1", "k2", "k3", "ratio_weighted")),
        *(f"policy_{mode}_{what}" for mode in ("tis", "mis") for what in ("token", "floor")),
    }


def test_an_option_is_declared_by_its_config_field(tmp_path):
    spec = _edited(tmp_path, LOSS, "    ratio_clip_c: float | None = None\n", "")
    assert "policy_dual_clip" not in load_target(spec).capabilities


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"dual_clip_c": policy.DUAL_CLIP_C, "aggregation": "token-mean"},
        {"kind": "cispo", "aggregation": "token-mean"},
        {"kl_coef": 0.1, "kl_kind": "k3", "kl_ratio_weighted": True, "aggregation": "seq-mean-token-mean"},
        {"rollout_correction": "tis", "rollout_floor": 0.5},
        {"rollout_correction": "mis", "aggregation": "token-mean"},
    ],
)
def test_the_loss_passes_the_token_level_checks(options):
    case = policy.with_options(CASE, **options)
    check_token_policy_loss(case, SPEC)
    if options.get("kl_coef"):
        check_token_kl_term_gradient(case, SPEC)


@pytest.mark.parametrize(
    ("options", "missing"),
    [
        ({"kl_coef": 0.1, "kl_kind": "k3"}, "policy_kl_without_score_term"),
        (
            {"kl_coef": 0.1, "kl_kind": "k1", "kl_ratio_weighted": True, "rollout_correction": "tis"},
            "policy_kl_ratio_weighted_with_rollout_correction",
        ),
        ({"kind": "cispo", "aggregation": "seq-mean-token-mean"}, "policy_cispo_agg_seq-mean-token-mean"),
    ],
)
def test_combinations_without_a_nemo_form_are_unsupported(options, missing):
    with pytest.raises(pytest.skip.Exception, match=missing):
        check_token_policy_loss(policy.with_options(CASE, **options), SPEC)


def test_an_entropy_bonus_is_unsupported_the_loss_has_none():
    with pytest.raises(pytest.skip.Exception, match="token_policy_entropy"):
        check_token_policy_loss(CASE.with_(entropy_coef=0.1), SPEC)


def test_a_detached_kl_fails_the_term_gradient(tmp_path):
    spec = _edited(
        tmp_path, "nemo_rl/algorithms/utils.py", "log_ratio = logprobs_reference - logprobs\n",
        "log_ratio = logprobs_reference - logprobs.detach()\n",
    )  # fmt: skip
    case = policy.with_options(CASE, kl_coef=0.5, kl_kind="k2", kl_ratio_weighted=True)
    with pytest.raises(AssertionError, match="grad"):
        check_token_kl_term_gradient(case, spec)


def test_an_option_present_but_not_passed_through_fails(tmp_path):
    """ratio_clip_c is read but never applied: declared (the field is there), so the check runs and FAILS."""
    spec = _edited(tmp_path, LOSS, "if self.dual_c is not None:", "if False:")
    case = policy.with_regime(policy.with_options(CASE, dual_clip_c=policy.DUAL_CLIP_C), ratio="far")
    check_token_policy_loss(case, SPEC)
    with pytest.raises(AssertionError):
        check_token_policy_loss(case, spec)


def test_a_detached_on_policy_kl_weight_fails(tmp_path):
    """NeMo-RL before #2506 detached the on-policy KL weight exp(logp - generation): the ratio-weighted KL is
    declared by its config field, so that weight's missing gradient reads FAIL, not UNSUPPORTED."""
    head = "torch.exp(logp - generation_logprobs) if self.on_policy_kl"
    spec = _edited(tmp_path, LOSS, head, "torch.exp(logp - generation_logprobs).detach() if self.on_policy_kl")
    case = policy.with_options(CASE, kl_coef=0.5, kl_kind="k3", kl_ratio_weighted=True)
    check_token_kl_term_gradient(case, SPEC)
    with pytest.raises(AssertionError, match="grad"):
        check_token_kl_term_gradient(case, spec)
