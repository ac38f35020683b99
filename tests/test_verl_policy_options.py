"""Self-tests of the verl adapter's policy-loss options, offline on the stand-in tree (``tests/fakes/verl``).

The capabilities are probed on the loaded functions: the fake's registry has
only ``vanilla`` (with ``clip_ratio_c``) and its ``agg_loss`` only
``seq-mean-token-mean``, so exactly those options are declared, and a Case
needing another one is UNSUPPORTED, never run as plain PPO. Both entry
points go through the same composition (``verl_policy.loss``).
"""

import pytest

from harness.cases import policy
from harness.cases.case import Case
from harness.checks.policy import check_policy_loss
from harness.checks.token_policy import check_token_policy_loss
from tests.fakes.verl import targets as fakes

CORRECT = f"{fakes.__file__}:correct"
CASE = Case(seed=5, vocab=12, samples=((7, 4), (3, 0), (5, 4)), mask_mode="mixed", entropy_coef=0.1)


def test_only_the_options_the_loaded_functions_have_are_declared():
    caps = fakes.correct().capabilities
    assert {"token_policy_loss", "policy_dual_clip", "policy_agg_seq-mean-token-mean"} <= caps
    assert not {"policy_gspo", "policy_cispo", "policy_kl_k1", "policy_tis_token", "policy_agg_token-mean"} & caps


@pytest.mark.parametrize("options", [{}, {"dual_clip_c": policy.DUAL_CLIP_C}, {"aggregation": "seq-mean-token-mean"}])
def test_both_entry_points_match_the_oracle(options):
    case = policy.with_options(CASE, **options)
    check_token_policy_loss(case, CORRECT)
    check_policy_loss(case, CORRECT)


def test_an_option_the_fake_lacks_is_unsupported_not_plain_ppo():
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED.*policy_gspo"):
        check_token_policy_loss(policy.with_options(CASE, kind="gspo"), CORRECT)
