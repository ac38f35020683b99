"""ms-swift's Megatron GRPO loss entry, offline on the stand-in tree ``tests/fakes/ms_swift``.

The stand-in's ``loss_func`` is a method of a trainer whose module imports
absent packages: the record must load it alone, declare the options its
Megatron arguments have fields for, and pass the token-level checks on them.
"""

import pytest

from harness.cases import policy
from harness.cases.case import Case
from harness.checks.token_policy import check_token_kl_term_gradient, check_token_policy_loss
from tests.fakes.reach_targets import MsSwift

SPEC = "tests/fakes/reach_targets.py:MsSwift"
CASE = Case(seed=41, vocab=12, samples=((7, 4), (3, 0), (6, 5)), mask_mode="mixed")


def test_declares_the_options_its_arguments_have():
    assert MsSwift().capabilities >= {
        "token_policy_loss",
        "policy_agg_seq-mean-token-mean",
        "policy_agg_token-mean",
        "policy_agg_seq-mean-token-sum-norm",
        "policy_gspo",
        "policy_dual_clip",
        "policy_gspo_dual_clip",
        "policy_kl_low_var_kl",
    }
    assert "policy_cispo" in MsSwift().not_declared


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"aggregation": "sum-of-sample-mean"},
        {"kind": "gspo", "dual_clip_c": policy.DUAL_CLIP_C, "aggregation": "token-mean"},
        {"kl_coef": 0.1, "kl_kind": "low_var_kl", "aggregation": "seq-mean-token-mean"},
        {"aggregation": "seq-mean-token-sum-norm", "horizon": 64.0, "dual_clip_c": policy.DUAL_CLIP_C},
    ],
)
def test_the_loss_passes_the_token_level_checks(options):
    case = policy.with_options(CASE, **options)
    check_token_policy_loss(case, SPEC)
    if options.get("kl_coef"):
        check_token_kl_term_gradient(case, SPEC)


def test_a_dual_clip_below_the_upper_clip_is_refused_by_name():
    with pytest.raises(ValueError, match="dual_clip_c=1.1"):
        check_token_policy_loss(policy.with_options(CASE, dual_clip_c=1.1), SPEC)
