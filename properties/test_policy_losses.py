"""Policy-loss options: parity, term gradients, aggregation under context parallelism.

What consumes the log-probs (docs/policy-losses.md): GSPO's sequence ratio,
CISPO, the dual clip, KL loss terms, the rollout corrections (TIS, MIS,
rejection) and the aggregation modes, each behind its own capability, on
packed batches with TP and CP layouts, all-zero masks and empty responses.
Loss value and gradient against the float64 oracle (``oracles/policy.py``);
the KL term's gradient is present exactly when its coefficient is (the
bug-1 shape, as ``check_entropy_bonus_gradient`` is for the entropy); the
CP ranks' shares equal the loss of the same batch without CP.

The protocol has no token-level policy loss, so there is no token-level
variant. Cost: each example runs the ranks once or twice, so the drawn
examples are an eighth of the profile's (10 in ``ci``); the explicit
examples cover every option, on a CP layout where it matters, so that every
option's mutant (harness/mutants/catalog.py) is killed on any profile.

Regimes (harness/cases/policy.py): the strategies draw each active option's
inputs near (ratios near 1, the reference near the policy) or far (ratios
from 0.05 to 20, the reference 6 nats away, rollout weights far outside the
cap and floor); ``FAR_EXAMPLES`` pins every option in its far regime, where
its clamp, saturation or truncation bound bites, so each option's regime
mutant is killed on any profile.

Tiers (docs/gate.md): finite logits are the contract; special values are
hardening.
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
from harness.cases.strategies import SPECIAL_VALUES
from harness.checks.policy import (
    check_entropy_bonus_gradient,
    check_kl_term_gradient,
    check_policy_cp_invariance,
    check_policy_loss,
)

FEW = settings(max_examples=max(1, settings.default.max_examples // 8))


def _with(case: Case, **values) -> Case:
    return policy.with_options(case, **values)


# Every option once, with TP, CP (zigzag and allgather), masks mixed / all zero and empty responses.
_BASE = Case(seed=11, vocab=16, tp=2, samples=((9, 6), (5, 3), (3, 0)), mask_mode="mixed", entropy_coef=0.01)
_CP = Case(seed=12, vocab=8, cp=2, cp_mode="zigzag", samples=((11, 8), (6, 4), (2, 0)), mask_mode="mixed")
_CP_ALLGATHER = _CP.with_(cp_mode="allgather", seed=13)
_ZEROS = _BASE.with_(mask_mode="zeros", seed=14)
OPTION_EXAMPLES = (
    _with(_BASE, dual_clip_c=policy.DUAL_CLIP_C),
    _with(_BASE, kind="gspo", dual_clip_c=policy.DUAL_CLIP_C, aggregation="token-mean"),
    _with(_CP, kind="gspo"),
    _with(_BASE, kind="cispo", aggregation="seq-mean-token-mean"),
    _with(_BASE, kl_coef=0.1, kl_kind="k3", kl_ratio_weighted=True),
    _with(_BASE, rollout_correction="tis", rollout_floor=0.5),
    _with(_BASE, rollout_correction="mis", aggregation="seq-mean-token-sum"),
    # Seed 19: one sample's product weight above the cap (rejected), the other's below (kept with weight 1).
    _with(_CP_ALLGATHER.with_(seed=19), rollout_correction="rs", rollout_level="sequence"),
    _with(_CP, rollout_correction="mis", rollout_level="geometric", aggregation="token-sum"),
    _with(_CP, aggregation="token-mean", kl_coef=-0.5, kl_kind="low_var_kl"),
    _with(_CP_ALLGATHER.with_(entropy_coef=0.5), aggregation="seq-mean-token-sum-norm", horizon=HORIZON),
    _with(_ZEROS, kind="gspo", rollout_correction="tis", rollout_level="sequence", aggregation="token-mean"),
)


FAR_EXAMPLES = far_examples(_BASE, _CP)


def _examples(cases_):
    def decorate(fn):
        for case in reversed(cases_):
            fn = example(case=case)(fn)
        return fn

    return decorate


@pytest.mark.tier("contract")
@FEW
@given(case=policy_cases())
@_examples(OPTION_EXAMPLES + FAR_EXAMPLES)
def test_policy_option_parity(case, spec):
    check_policy_loss(case, spec)


@pytest.mark.tier("hardening")
@FEW
@given(case=policy_cases(special=SPECIAL_VALUES))
def test_policy_option_parity_special_values(case, spec):
    check_policy_loss(case, spec)


@pytest.mark.tier("contract")
@FEW
@given(case=policy_cases(options=loss_options(kl=NONZERO_KL_COEFS), dtype=FLOAT32))
@_examples(
    (
        _with(_BASE, kl_coef=0.1, kl_kind="k1"),
        _with(_CP, kl_coef=1.0, kl_kind="abs"),
        *(case for case in FAR_EXAMPLES if policy.loss_options(case).kl_coef),  # every KL term far from the ref
    )
)
def test_kl_term_gradient(case, spec):
    check_kl_term_gradient(case, spec)


@pytest.mark.tier("contract")
@FEW
@given(case=policy_cases(with_entropy=st.just(True), dtype=FLOAT32).filter(lambda case: case.entropy_coef != 0))
@example(case=_with(_BASE.with_(entropy_coef=0.5), aggregation="token-mean"))
def test_entropy_term_gradient(case, spec):
    check_entropy_bonus_gradient(case, spec)


@pytest.mark.tier("contract")
@FEW
@given(case=policy_cases(tp=st.sampled_from((1, 2)), cp_sizes=(2, 4)))
@_examples(
    (
        _with(_CP, aggregation="token-mean", kind="gspo"),
        _with(_CP_ALLGATHER, aggregation="seq-mean-token-sum", rollout_correction="tis", rollout_level="geometric"),
    )
)
def test_policy_cp_invariance(case, spec):
    check_policy_cp_invariance(case, spec)
