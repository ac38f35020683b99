"""Hypothesis strategies for policy-loss Cases with options (docs/policy-losses.md).

Shared by the packed-level properties (``properties/test_policy_losses.py``)
and the token-level ones (``properties/test_token_policy_losses.py``): a few
options at once, each mostly at its default so that a failure names few; and
the inputs of each active option drawn in one of its regimes
(``harness.cases.policy``: ``near``, or ``far`` where its clamps, saturations
and truncation bounds bite), a third of the time far.
"""

from __future__ import annotations

from hypothesis import strategies as st

from harness.cases import policy
from harness.cases.case import Case
from harness.cases.strategies import cases

HORIZON = 64.0  # seq-mean-token-sum-norm's constant: the longest drawn response
ROLLOUT_MAX_SCALE = 30.0  # rollout log-weights resolvable in float32 (harness.cases.policy.rollout_log_probs)


KL_COEFS = st.sampled_from((0.0, 0.0, 0.1, -0.5))
NONZERO_KL_COEFS = st.sampled_from((0.1, -0.5, 1.0))
# A term's gradient is the difference of two gradients rounded to the Case's dtype: in 16-bit formats a
# small term (coef 0.01) vanishes below the rounding of the rest (as in regressions/test_inverted_no_grad_gate.py).
FLOAT32 = st.just("float32")


@st.composite
def loss_options(draw, kl=KL_COEFS):
    """A few loss options at once (each mostly at its default, so failures name few)."""
    kind = draw(st.sampled_from(("ppo", "ppo", "gspo", "cispo")))
    values = {"kind": kind}
    if kind != "cispo" and draw(st.booleans()):
        values["dual_clip_c"] = policy.DUAL_CLIP_C
    coef = draw(kl)
    if coef:
        values.update(
            kl_coef=coef,
            kl_kind=draw(st.sampled_from(("k1", "k2", "k3", "low_var_kl", "abs"))),
            kl_ratio_weighted=draw(st.booleans()),
        )
    correction = draw(st.sampled_from((None, None, "tis", "mis", "rs")))
    if correction:
        values.update(
            rollout_correction=correction,
            rollout_level=draw(st.sampled_from(("token", "sequence", "geometric"))),
            rollout_floor=draw(st.sampled_from((None, 0.5))),
        )
    aggregation = draw(
        st.sampled_from(
            (
                "sum-of-sample-mean",
                "token-mean",
                "token-sum",
                "seq-mean-token-sum",
                "seq-mean-token-mean",
                "seq-mean-token-sum-norm",
            )
        )
    )
    values["aggregation"] = aggregation
    if aggregation == "seq-mean-token-sum-norm":
        values["horizon"] = HORIZON
    return values


REGIME = st.sampled_from(("near", "near", "far"))


@st.composite
def regimes(draw, values: dict):
    """The regime of each quantity the options read: the ratios always, the reference with a KL term, the
    rollout weights with a rollout correction; only the far ones are named (near is the default)."""
    drawn = {"ratio": draw(REGIME)}
    if values.get("kl_coef"):
        drawn["reference"] = draw(REGIME)
    if values.get("rollout_correction"):
        drawn["rollout"] = draw(REGIME)
    return {quantity: regime for quantity, regime in drawn.items() if regime == "far"}


@st.composite
def policy_cases(draw, options=None, **case_kwargs):
    """A policy-loss Case with options (``loss_options()`` by default) and their regimes; rollout corrections
    at moderate scales."""
    case = draw(cases(max_samples=4, max_length=24, max_vocab_local=24, **case_kwargs))
    values = draw(options if options is not None else loss_options())
    if values.get("rollout_correction") and case.logit_scale > ROLLOUT_MAX_SCALE:
        case = case.with_(logit_scale=ROLLOUT_MAX_SCALE)
    far = draw(regimes(values))
    case = policy.with_options(case, **values)
    return policy.with_regime(case, **far) if far else case


def far_examples(base: Case, cp_base: Case) -> tuple[Case, ...]:
    """Every option in its far regime (``harness.cases.policy``), on ``base`` (``cp_base`` where the sample's
    statistic crosses CP ranks: GSPO's mean, the sequence rollout weight): the clip band and the dual clip (ratios
    up to 20), GSPO's sample ratio, CISPO's clipped weight, k3 and low_var_kl (saturated) far from the reference,
    the ratio-weighted KL, the rollout weights far outside the cap and floor. Pinned by both policy-loss property
    files, so each option's regime mutant (``harness/mutants/policy.py``) is killed on any profile."""

    def far(case: Case, **regimes) -> Case:
        return policy.with_regime(case, **regimes)

    def option(case: Case, **values) -> Case:
        return policy.with_options(case, **values)

    return (
        far(base, ratio="far"),
        far(option(base, dual_clip_c=policy.DUAL_CLIP_C), ratio="far"),
        far(option(cp_base, kind="gspo"), ratio="far"),
        far(option(base, kind="cispo"), ratio="far"),
        far(option(base, kl_coef=0.1, kl_kind="k3"), reference="far"),
        far(option(base, kl_coef=0.1, kl_kind="low_var_kl"), reference="far"),
        far(option(base, kl_coef=0.1, kl_kind="k2", kl_ratio_weighted=True), reference="far", ratio="far"),
        far(option(base, rollout_correction="tis"), rollout="far"),
        far(option(cp_base, rollout_correction="mis", rollout_level="sequence"), rollout="far"),
        far(option(base, rollout_correction="rs"), rollout="far"),
    )
