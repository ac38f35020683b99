"""Self-tests of the policy-loss options plumbing: capabilities, defaults, Case options, impl's argument errors."""

import itertools

import pytest

from harness.cases import policy
from harness.cases.case import Case
from harness.jobs.logits import policy_options
from harness.targets.protocol import CAPABILITIES, PolicyOptions
from impl.policy_terms import LossTerms


class _Rank0:
    cp_rank = 0


def test_default_options_need_no_capability_and_are_not_passed():
    assert PolicyOptions().capabilities() == set()
    explicit_defaults = policy.with_options(Case(), kind="ppo", aggregation="sum-of-sample-mean", kl_coef=0.0)
    assert policy_options(explicit_defaults, _Rank0()) == {}


@pytest.mark.parametrize(
    ("mode", "level"), list(itertools.product(("tis", "mis", "rs"), ("token", "sequence", "geometric")))
)
def test_every_option_names_a_declared_capability(mode, level):
    options = PolicyOptions(
        kind="gspo",
        dual_clip_c=1.4,
        kl_coef=0.1,
        kl_kind="abs",
        kl_ratio_weighted=True,
        rollout_correction=mode,
        rollout_level=level,
        rollout_floor=0.5,
        aggregation="token-mean",
    )
    needed = options.capabilities()
    assert needed <= CAPABILITIES, needed - CAPABILITIES
    assert {"policy_gspo", "policy_gspo_dual_clip", "policy_kl_abs", f"policy_{mode}_{level}"} <= needed


def test_case_options_reject_an_unknown_field_by_name():
    with pytest.raises(ValueError, match="unknown option.*'clip_c'"):
        policy.with_options(Case(), clip_c=3.0)


def test_case_options_reach_the_target_with_their_tensors():
    case = policy.with_options(
        Case(samples=((6, 4), (3, 0))), kl_coef=0.1, rollout_correction="tis", rollout_level="sequence"
    )
    options = policy_options(case, _Rank0())["options"]
    assert options.kl_coef == 0.1 and options.rollout_level == "sequence"
    assert [len(v) for v in options.ref_log_probs] == [4, 0] == [len(v) for v in options.rollout_log_probs]


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"kind": "sppo"}, "kind="),
        ({"dual_clip_c": 0.5}, "dual_clip_c="),
        ({"kind": "cispo", "dual_clip_c": 2.0}, "dual_clip_c="),
        ({"kl_kind": "k4"}, "kl_kind="),
        ({"rollout_correction": "icepop"}, "rollout_correction="),
        ({"rollout_floor": 3.0}, "rollout_floor="),
        ({"aggregation": "seq-mean-token-sum-norm"}, "horizon="),
    ],
)
def test_impl_names_a_bad_setting(settings, named):
    problems = LossTerms(**settings).problems()
    assert len(problems) == 1 and named in problems[0], problems
