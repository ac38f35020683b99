"""The TRL GRPO-loss adapter's seams, offline on the stand-in tree ``tests/fakes/trl_grpo`` (no TRL, no transformers).

The stand-in's trainer derives from an absent ``transformers.Trainer`` and its
module imports the absent package's names: the adapter must load the method
alone, answer the model call with the harness's log-probs, declare exactly
the options the method reads, pass the token-level checks on them, and a
KL term that lost its gradient must fail the term-gradient check.
"""

import shutil

import pytest

from harness.cases import policy
from harness.cases.case import Case
from harness.checks.token_policy import check_token_kl_term_gradient, check_token_policy_loss
from harness.targets.trl.policy import TRLPolicyTarget
from tests.fakes.reach_targets import HERE

ROOT = HERE / "trl_grpo"
CASE = Case(seed=31, vocab=12, samples=((7, 4), (3, 0), (6, 5)), mask_mode="mixed")


class _Fake(TRLPolicyTarget):
    def __init__(self):
        super().__init__(root=ROOT)


SPEC = f"{__file__}:_Fake"


def test_declares_what_the_method_reads():
    target = _Fake()
    assert target.name == "trl-1.0.0+grpo-stand-in"
    assert target.capabilities == {
        "token_policy_loss",
        "policy_agg_seq-mean-token-mean",
        "policy_agg_token-mean",
        "policy_agg_seq-mean-token-sum-norm",
        "policy_kl_k3",
        "policy_kl_ratio_weighted",
        "policy_dual_clip",
    }


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"dual_clip_c": policy.DUAL_CLIP_C, "aggregation": "token-mean"},
        {"kl_coef": 0.1, "kl_kind": "k3", "kl_ratio_weighted": True, "aggregation": "seq-mean-token-mean"},
        {"aggregation": "seq-mean-token-sum-norm", "horizon": 64.0},
    ],
)
def test_the_loss_passes_the_token_level_checks(options):
    case = policy.with_options(CASE, **options)
    check_token_policy_loss(case, SPEC)
    if options.get("kl_coef"):
        check_token_kl_term_gradient(case, SPEC)


def test_an_entropy_bonus_is_unsupported_its_aggregation_is_trls_own():
    with pytest.raises(pytest.skip.Exception, match="token_policy_entropy"):
        check_token_policy_loss(CASE.with_(entropy_coef=0.1), SPEC)


def test_a_detached_kl_fails_the_term_gradient(tmp_path):
    root = tmp_path / "trl_grpo"
    shutil.copytree(ROOT, root)
    trainer = root / "trl" / "trainer" / "grpo_trainer.py"
    text = trainer.read_text()
    assert 'd = inputs["ref_per_token_logps"] - logps\n' in text
    trainer.write_text(text.replace("- logps\n", "- logps.detach()\n", 1))
    adapter = tmp_path / "adapter.py"
    adapter.write_text(
        "from harness.targets.trl.policy import TRLPolicyTarget\n\n"
        f"class T(TRLPolicyTarget):\n    def __init__(self):\n        super().__init__(root={str(root)!r})\n"
    )
    case = policy.with_options(CASE, kl_coef=0.5, kl_kind="k3")
    with pytest.raises(AssertionError, match="grad"):
        check_token_kl_term_gradient(case, f"{adapter}:T")
