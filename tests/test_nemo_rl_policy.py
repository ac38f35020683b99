"""NeMo-RL's policy-loss adapter's seams, offline on the stand-in tree ``tests/fakes/nemo_rl/policy``.

The stand-in's ``ClippedPGLossFn`` imports absent packages (the trainer's
stack, pydantic's config) as the real module does: the adapter must load the
class alone, map the options NeMo-RL has, refuse the combinations it has no
form for (UNSUPPORTED, not run as something else), pass the token-level
checks, and a KL whose log-probs lost their gradient must fail the
term-gradient check. The family target (the gate's ``nemo_rl=PATH``) carries
the policy entry where the checkout has the loss package.
"""

import shutil

import pytest

from harness.cases import policy
from harness.cases.case import Case
from harness.checks.token_policy import check_token_kl_term_gradient, check_token_policy_loss
from harness.targets.nemo_rl.policy import NemoRLPolicyTarget
from harness.targets.nemo_rl.token import NemoRLTarget
from tests.fakes.reach_targets import HERE

ROOT = HERE / "nemo_rl" / "policy"
CASE = Case(seed=31, vocab=12, samples=((7, 4), (3, 0), (6, 5)), mask_mode="mixed")


class _Fake(NemoRLPolicyTarget):
    def __init__(self):
        super().__init__(root=ROOT)


SPEC = f"{__file__}:_Fake"


def _adapter(tmp_path, root, cls="harness.targets.nemo_rl.policy:NemoRLPolicyTarget") -> str:
    module, name = cls.split(":")
    adapter = tmp_path / "adapter.py"
    adapter.write_text(
        f"from {module} import {name}\n\n"
        f"class T({name}):\n    def __init__(self):\n        super().__init__({str(root)!r})\n"
    )
    return f"{adapter}:T"


def test_declares_what_the_class_reads():
    assert _Fake().capabilities == {
        "token_policy_loss",
        "policy_agg_token-mean",
        "policy_agg_seq-mean-token-mean",
        "policy_dual_clip",
        "policy_cispo",
        *(f"policy_kl_{kind}" for kind in ("k1", "k2", "k3", "ratio_weighted")),
        *(f"policy_{mode}_{what}" for mode in ("tis", "mis") for what in ("token", "floor")),
    }


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
    root = tmp_path / "nemo"
    shutil.copytree(ROOT, root)
    utils = root / "nemo_rl" / "algorithms" / "utils.py"
    text = utils.read_text()
    assert "log_ratio = logprobs_reference - logprobs\n" in text
    utils.write_text(text.replace("- logprobs\n", "- logprobs.detach()\n", 1))
    case = policy.with_options(CASE, kl_coef=0.5, kl_kind="k2", kl_ratio_weighted=True)
    with pytest.raises(AssertionError, match="grad"):
        check_token_kl_term_gradient(case, _adapter(tmp_path, root))


def test_an_earlier_kl_weight_is_read_from_the_source(tmp_path):
    """Before HEAD's score term, NeMo's KL weight was 1 (the plain KL) and the on-policy one detached."""
    root = tmp_path / "nemo"
    shutil.copytree(ROOT, root)
    losses = root / "nemo_rl" / "algorithms" / "loss" / "loss_functions.py"
    text = losses.read_text()
    head = "torch.exp(logp - generation_logprobs) if self.on_policy_kl else torch.exp(logp - logp.detach())"
    assert head in text
    earlier = "torch.exp(logp - generation_logprobs).detach() if self.on_policy_kl else torch.ones_like(logp)"
    losses.write_text(text.replace(head, earlier))
    spec = _adapter(tmp_path, root)
    case = policy.with_options(CASE, kl_coef=0.5, kl_kind="k3")
    check_token_policy_loss(case, spec)
    check_token_kl_term_gradient(case, spec)
    with pytest.raises(pytest.skip.Exception, match="policy_kl_ratio_weighted"):
        check_token_policy_loss(policy.with_options(case, kl_ratio_weighted=True), spec)


def test_the_family_target_carries_the_policy_loss(tmp_path):
    """The gate's ``nemo_rl`` target: the log-prob Functions plus the loss where the checkout has it."""
    root = tmp_path / "nemo"
    shutil.copytree(ROOT, root)
    shutil.copytree(HERE / "nemo_rl" / "fixed" / "nemo_rl" / "distributed", root / "nemo_rl" / "distributed")
    spec = _adapter(tmp_path, root, "harness.targets.nemo_rl.sampling:NemoRLSamplingTarget")
    check_token_policy_loss(policy.with_options(CASE, dual_clip_c=policy.DUAL_CLIP_C), spec)
    with pytest.raises(pytest.skip.Exception, match="policy_cispo_agg_sum-of-sample-mean"):
        check_token_policy_loss(policy.with_options(CASE, kind="cispo"), spec)
    assert NemoRLTarget(HERE / "nemo_rl" / "fixed").policy is None
