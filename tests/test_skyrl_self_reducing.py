"""SkyRL's policy loss before #1296 (2026-03-31): each registry loss reduces itself (``reduce_loss``).

The record's second ``policy_loss`` form serves a tree without ``apply_loss_reduction_to_advantages_minibatch``
(SkyRL's registry losses from 2025-09 to 2026-03): ``tests/fakes/skyrl_self_reducing/ppo_utils.py`` in a copy of
``skyrl_fixed`` (``tests/fakes/skyrl_targets.py``). It must pass the policy checks for each aggregation the
stand-in's ``reduce_loss`` takes, with CP shares adding up (the full loss masks, this rank's advantages), declare
what the form declares and not the rejection modes (a rejected token leaves ``reduce_loss``'s denominators there),
and a KL estimator without a gradient (SkyRL before #1353: ``@torch.no_grad()`` on ``compute_approx_kl``) must FAIL
the KL term's check.
"""

import pytest

from harness.cases import policy
from harness.cases.case import Case
from harness.checks.policy import check_kl_term_gradient, check_policy_loss
from harness.targets import load_target
from harness.targets.skyrl import family
from tests.fakes import skyrl_targets

STAND_INS = "tests/fakes/skyrl_targets.py"
SPEC, KL_NO_GRAD = f"{STAND_INS}:SelfReducing", f"{STAND_INS}:SelfReducingKlNoGrad"
CASE = Case(seed=21, vocab=12, samples=((7, 4), (3, 0), (6, 5)), with_entropy=True, entropy_coef=0.2)
CP_CASE = Case(seed=22, vocab=12, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 3), (2, 1)), pad_multiple=3,
               with_entropy=True, entropy_coef=0.2)  # fmt: skip


def test_the_self_reducing_form_serves_and_declares_its_reductions():
    target = load_target(SPEC)
    assert target.entries["policy_loss"].translate is family.policy_loss_self_reducing
    assert {"policy_loss", "policy_dual_clip", "policy_kl_low_var_kl", "policy_agg_token-mean"} <= target.capabilities
    assert {"policy_agg_seq-mean-token-mean", "policy_agg_seq-mean-token-sum-norm"} <= target.capabilities
    assert skyrl_targets.PPO_UTILS in target.executed


def test_rejection_is_declared_only_where_the_reduction_is_in_the_advantages():
    def with_correction(text):
        return text + "\n\ndef apply_off_policy_correction(loss, old, rollout, loss_mask, config):\n    return loss\n"

    declared = skyrl_targets.RECORD.target(skyrl_targets.self_reducing_tree(with_correction)).capabilities
    assert {"policy_tis_token", "policy_tis_sequence"} <= declared
    assert not declared & {"policy_mis_token", "policy_rs_token", "policy_rs_sequence", "policy_mis_floor"}


@pytest.mark.parametrize(
    ("case", "options"),
    [
        (CASE, {}),
        (CASE, {"aggregation": "token-mean", "dual_clip_c": policy.DUAL_CLIP_C}),
        (CP_CASE, {"aggregation": "token-mean"}),
        (CP_CASE, {"aggregation": "seq-mean-token-mean", "kl_coef": 0.1, "kl_kind": "low_var_kl"}),
        (CP_CASE, {"aggregation": "seq-mean-token-sum-norm", "horizon": 9.0}),
    ],
    ids=["plain", "token-mean-dual-clip", "cp-token-mean", "cp-seq-mean-kl", "cp-sum-norm"],
)
def test_the_self_reducing_loss_passes_the_policy_checks(case, options):
    check_policy_loss(policy.with_options(case, **options), SPEC)


def test_a_kl_estimator_without_gradient_fails_the_kl_term_check():
    case = policy.with_options(CASE, kl_coef=0.5, kl_kind="k2")
    check_kl_term_gradient(case, SPEC)
    with pytest.raises(AssertionError, match=r"grad\(kl_coef\) - grad\(0\)"):
        check_kl_term_gradient(case, KL_NO_GRAD)
