"""Token-level policy loss: every option from ``[B, R]`` log-prob matrices (``Target.token_policy_loss``).

The loss functions trainers run on log-probs they already hold (verl's
``compute_policy_loss_*`` + ``agg_loss``, TRL's and ms-swift's GRPO loss):
value and gradient w.r.t. the log-probs and the entropy against the float64
oracle for drawn option sets, with mixed and all-zero masks, empty responses
(a row of padding) and a batch whose responses are all empty (``R = 0``);
the KL and entropy terms move the gradient exactly when their coefficient
is non-zero. The explicit examples cover every option, so each option's
mutant is killed on any profile, and the padding (mask 0 past a row's
response) is in every example with responses of different lengths.

Each option is also pinned in its far regime (``FAR_EXAMPLES``,
harness/cases/policy.py), where its clamp, saturation or truncation bound
bites.

Single-rank and in-process (no logits, so no TP or CP: the packed level,
``properties/test_policy_losses.py``, checks the layouts), and cheap:
an eighth of the profile's examples (10 in ``ci``), as at packed level.
"""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness.cases import policy
from harness.cases.case import Case
from harness.cases.policy_strategies import (
    FLOAT32,
    HORIZON,
    NONZERO_KL_COEFS,
    far_examples,
    loss_options,
    policy_cases,
)
from harness.checks.token_policy import (
    check_token_entropy_term_gradient,
    check_token_kl_term_gradient,
    check_token_policy_loss,
)

SOME = settings(max_examples=max(1, settings.default.max_examples // 8))
SINGLE_RANK = dict(tp=st.just(1), cp_sizes=(1,))


def _with(case: Case, **values) -> Case:
    return policy.with_options(case, **values)


# Responses of different lengths (padding), a masked tail, an empty response; all-zero masks; all empty.
_BASE = Case(seed=21, vocab=16, samples=((9, 6), (5, 3), (3, 0), (7, 5)), mask_mode="mixed", entropy_coef=0.01)
_ZEROS = _BASE.with_(mask_mode="zeros", seed=22)
_EMPTY = Case(seed=23, vocab=8, samples=((3, 0), (2, 0)), entropy_coef=0.5)
OPTION_EXAMPLES = (
    _BASE,
    _with(_BASE, dual_clip_c=policy.DUAL_CLIP_C),
    _with(_BASE, kind="gspo", dual_clip_c=policy.DUAL_CLIP_C, aggregation="token-mean"),
    _with(_BASE.with_(seed=24), kind="gspo", aggregation="seq-mean-token-sum"),
    _with(_BASE, kind="cispo", aggregation="seq-mean-token-mean"),
    _with(_BASE, kl_coef=0.1, kl_kind="k3", kl_ratio_weighted=True),
    _with(_BASE, kl_coef=-0.5, kl_kind="low_var_kl", aggregation="token-sum"),
    _with(_BASE, rollout_correction="tis", rollout_floor=0.5),
    _with(_BASE, rollout_correction="mis", aggregation="seq-mean-token-sum"),
    # Seed 19 (as at packed level): one sample's product weight above the cap, another's below.
    _with(_BASE.with_(seed=19), rollout_correction="rs", rollout_level="sequence"),
    _with(_BASE, rollout_correction="mis", rollout_level="geometric", aggregation="token-mean"),
    _with(_BASE.with_(entropy_coef=0.5), aggregation="seq-mean-token-sum-norm", horizon=HORIZON),
    _with(_ZEROS, kind="gspo", rollout_correction="tis", rollout_level="sequence", aggregation="token-mean"),
    _with(_ZEROS, kl_coef=0.1, kl_kind="k2", aggregation="seq-mean-token-mean"),
    _with(_EMPTY, aggregation="token-mean", kl_coef=0.1, kl_kind="k1"),
)


FAR_EXAMPLES = far_examples(_BASE, _BASE)


def _examples(cases_):
    def decorate(fn):
        for case in reversed(cases_):
            fn = example(case=case)(fn)
        return fn

    return decorate


@pytest.mark.tier("contract")
@SOME
@given(case=policy_cases(**SINGLE_RANK))
@_examples(OPTION_EXAMPLES + FAR_EXAMPLES)
def test_token_policy_option_parity(case, spec):
    check_token_policy_loss(case, spec)


@pytest.mark.tier("contract")
@SOME
@given(case=policy_cases(options=loss_options(kl=NONZERO_KL_COEFS), dtype=FLOAT32, **SINGLE_RANK))
@_examples((_with(_BASE, kl_coef=0.1, kl_kind="k1"), _with(_BASE, kl_coef=1.0, kl_kind="abs")))
def test_token_kl_term_gradient(case, spec):
    check_token_kl_term_gradient(case, spec)


@pytest.mark.tier("contract")
@SOME
@given(case=policy_cases(with_entropy=st.just(True), **SINGLE_RANK))
@_examples(
    (
        _BASE.with_(entropy_coef=0.0),
        _with(_BASE.with_(entropy_coef=0.5), aggregation="token-mean"),
        _with(_BASE.with_(entropy_coef=-0.2), aggregation="seq-mean-token-sum"),
    )
)
def test_token_entropy_term_gradient(case, spec):
    check_token_entropy_term_gradient(case, spec)
