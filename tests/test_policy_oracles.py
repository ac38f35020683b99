"""Self-tests of oracles/policy.py (docs/policy-losses.md) against numbers worked out by hand.

Independent means: values computed by hand in the comments, closed-form
gradients, float64 finite differences (``torch.autograd.gradcheck``), and a
second route to the same quantity (a product of ratios for GSPO's geometric
mean, the sequence-level GSPO objective for GSPO-token's gradient).
"""

import math

import pytest
import torch

from oracles import losses, policy, token
from oracles.policy import LossOptions


def t(*xs, grad=False):
    return torch.tensor(xs, dtype=torch.float64, requires_grad=grad)


def grad_of(loss, *inputs):
    """Gradients of ``loss`` w.r.t. ``inputs``; an input the loss does not reach gets zeros."""
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]


def _batch(seed=0, lengths=(4, 1, 3, 0, 5), masked=0.3):
    """Per-sample lists: logp, old, adv (per token), masks, ref, rollout, entropy."""
    g = torch.Generator().manual_seed(seed)

    def draw(n, lo, hi):
        return lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)

    logp = [draw(n, -3.0, -0.1) for n in lengths]
    old = [lp + draw(n, -0.5, 0.5) for lp, n in zip(logp, lengths)]
    adv = [draw(n, -2.0, 2.0) for n in lengths]
    masks = [(torch.rand(n, generator=g) > masked).double() for n in lengths]
    ref = [lp + draw(n, -1.0, 1.0) for lp, n in zip(logp, lengths)]
    rollout = [o + draw(n, -1.0, 1.0) for o, n in zip(old, lengths)]
    entropy = [draw(n, 0.0, 2.0) for n in lengths]
    return logp, old, adv, masks, ref, rollout, entropy


# ---- importance ratio and PPO-clip ---------------------------------------------------------


def test_ratio_is_exp_of_log_ratio():
    # logp - old = log 3 - 1 - (-1) = log 3  ->  r = 3
    assert policy.ratio(t(math.log(3) - 1), t(-1.0)).item() == pytest.approx(3.0, rel=1e-15)
    # logp - old = log 0.25  ->  r = 0.25
    assert policy.ratio(t(math.log(0.25)), t(0.0)).item() == pytest.approx(0.25, rel=1e-15)


# (r, A, eps_low, eps_high, c, value, d value / d logp), all by hand. pg1 = -A r, pg2 = -A clip(r).
PPO_CASES = [
    # r = 1.5, A = +1: pg1 = -1.5, pg2 = -1.2 -> max = -1.2 (clipped: no gradient)
    (1.5, 1.0, 0.2, 0.2, None, -1.2, 0.0),
    # r = 1.5, A = -1: pg1 = 1.5, pg2 = 1.2 -> 1.5 (unclipped: d(-A r)/dlogp = -A r = 1.5)
    (1.5, -1.0, 0.2, 0.2, None, 1.5, 1.5),
    # r = 0.5, A = +1: pg1 = -0.5, pg2 = -0.8 -> -0.5, gradient -A r = -0.5
    (0.5, 1.0, 0.2, 0.2, None, -0.5, -0.5),
    # r = 0.5, A = -1: pg1 = 0.5, pg2 = 0.8 -> 0.8 (clipped at 1 - eps_low)
    (0.5, -1.0, 0.2, 0.2, None, 0.8, 0.0),
    # asymmetric: eps_high = 0.28, r = 1.5, A = +1 -> -1.28
    (1.5, 1.0, 0.2, 0.28, None, -1.28, 0.0),
    # asymmetric: eps_low = 0.1, r = 0.85, A = -1: pg1 = 0.85, pg2 = 0.9 -> 0.9 (0.85 < 1 - 0.1)
    (0.85, -1.0, 0.1, 0.28, None, 0.9, 0.0),
    # inside the band: r = 1.1, A = 2 -> -2.2, gradient -2.2
    (1.1, 2.0, 0.2, 0.2, None, -2.2, -2.2),
    # dual clip: r = 5, A = -2: max(10, 2.4) = 10, then min(10, 3 * 2) = 6 (constant: no gradient)
    (5.0, -2.0, 0.2, 0.2, 3.0, 6.0, 0.0),
    # dual clip inactive: r = 1.5, A = -1: 1.5 < 3 * 1 -> 1.5, gradient 1.5
    (1.5, -1.0, 0.2, 0.2, 3.0, 1.5, 1.5),
    # dual clip with c = 1.4: min(1.5, 1.4) = 1.4
    (1.5, -1.0, 0.2, 0.2, 1.4, 1.4, 0.0),
    # A > 0 ignores c: r = 5, A = 2: max(-10, -2.4) = -2.4 whatever c
    (5.0, 2.0, 0.2, 0.2, 1.4, -2.4, 0.0),
]


@pytest.mark.parametrize("r, adv, eps_low, eps_high, c, value, grad", PPO_CASES)
def test_ppo_clip_hand_cases(r, adv, eps_low, eps_high, c, value, grad):
    old = t(-0.7)
    logp = t(math.log(r) - 0.7, grad=True)
    pg = policy.ppo_clip_terms(logp, old, t(adv), eps_low, eps_high, dual_clip_c=c)
    assert pg.item() == pytest.approx(value, rel=1e-12)
    (g,) = grad_of(pg.sum(), logp)
    assert g.item() == pytest.approx(grad, rel=1e-12, abs=1e-15)


def test_dual_clip_changes_only_negative_advantages():
    g = torch.Generator().manual_seed(3)
    log_r = torch.empty(400, dtype=torch.float64).uniform_(-2.5, 2.5, generator=g)
    adv = torch.empty(400, dtype=torch.float64).uniform_(-2.0, 2.0, generator=g)
    adv[::7] = 0.0
    old = torch.zeros(400, dtype=torch.float64)
    logp = log_r.clone().requires_grad_(True)
    plain = policy.ppo_clip_terms(logp, old, adv, 0.2, 0.28)
    dual = policy.ppo_clip_terms(logp, old, adv, 0.2, 0.28, dual_clip_c=3.0)
    (g_plain,) = grad_of(plain.sum(), logp)
    (g_dual,) = grad_of(dual.sum(), logp)
    keep = adv >= 0
    assert torch.equal(dual[keep], plain[keep]) and torch.equal(g_dual[keep], g_plain[keep])
    neg = ~keep
    torch.testing.assert_close(dual[neg], torch.minimum(plain[neg], 3.0 * adv[neg].abs()), rtol=0, atol=0)
    changed = neg & (dual != plain)
    assert changed.sum() > 10  # the data reach the dual clip (r > 3 with A < 0) ...
    assert torch.all(g_dual[changed] == 0)  # ... where the loss is the constant c|A|
    assert torch.all(torch.exp(log_r[changed]) > 3.0)


# ---- KL estimators -------------------------------------------------------------------------

LN2 = math.log(2)


# d = logp - ref. k1 = d, k2 = d^2/2, k3 = exp(-d) + d - 1; gradients 1, d, 1 - exp(-d).
KL_CASES = [
    # d = ln 2 = 0.693147: k3 = 0.5 + 0.693147 - 1 = 0.193147, dk3 = 1 - 0.5 = 0.5
    ("k1", LN2, LN2, 1.0),
    ("k2", LN2, LN2 * LN2 / 2, LN2),  # 0.240227
    ("k3", LN2, 0.5 + LN2 - 1, 0.5),
    ("low_var_kl", LN2, 0.5 + LN2 - 1, 0.5),
    ("abs", LN2, LN2, 1.0),
    # d = -ln 2: k3 = 2 - 0.693147 - 1 = 0.306853, dk3 = 1 - 2 = -1
    ("k1", -LN2, -LN2, 1.0),
    ("k3", -LN2, 2 - LN2 - 1, -1.0),
    ("abs", -LN2, LN2, -1.0),
    # d = -2 (ref - logp = 2): k3 = e^2 - 3 = 4.389056 < 10, unclamped; dk3 = 1 - e^2 = -6.389056
    ("low_var_kl", -2.0, math.exp(2) - 3, 1 - math.exp(2)),
    # d = -3: k3 = e^3 - 4 = 16.08 -> low_var_kl clamps at 10, zero gradient
    ("low_var_kl", -3.0, 10.0, 0.0),
    ("k3", -3.0, math.exp(3) - 4, 1 - math.exp(3)),
    # d = 30: k3 = e^-30 + 29; low_var_kl: x = clamp(-30, -20, 20) = -20 -> e^-20 + 19 -> clamped to 10
    ("low_var_kl", 30.0, 10.0, 0.0),
    ("k3", 30.0, math.exp(-30) + 29, 1 - math.exp(-30)),
]


@pytest.mark.parametrize("kind, d, value, grad", KL_CASES)
def test_kl_hand_cases(kind, d, value, grad):
    ref = t(-1.3)
    logp = t(-1.3 + d, grad=True)
    k = policy.kl(logp, ref, kind)
    assert k.item() == pytest.approx(value, rel=1e-12)
    (g,) = grad_of(k.sum(), logp)
    assert g.item() == pytest.approx(grad, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("kind", ["k1+", "k2+", "k3+", "low_var_kl+"])
@pytest.mark.parametrize("d", [LN2, -LN2, -3.0, 30.0])
def test_kl_straight_through_has_base_value_and_k2_gradient(kind, d):
    ref = t(-0.4)
    logp = t(-0.4 + d, grad=True)
    k = policy.kl(logp, ref, kind)
    assert k.item() == pytest.approx(policy.kl(t(-0.4 + d), ref, kind[:-1]).item(), rel=1e-15)
    (g,) = grad_of(k.sum(), logp)
    # d(d^2/2)/dlogp = d, even where low_var_kl's clamp would give 0 (d = -3, 30)
    assert g.item() == pytest.approx(d, rel=1e-12)


@pytest.mark.parametrize("kind", ["k1", "k2", "k3", "abs", "low_var_kl"])
def test_kl_gradcheck(kind):
    ref = t(-1.0, -2.0, -0.5, -3.0)
    logp = t(-1.5, -0.7, -0.9, -2.2, grad=True)  # d = -0.5, 1.3, -0.4, 0.8: no clamp bites, d != 0
    assert torch.autograd.gradcheck(lambda lp: policy.kl(lp, ref, kind), (logp,))


def test_kl_reward_is_a_detached_penalty():
    old = t(-1.0, -2.0, grad=True)
    ref = t(-1.5, -1.0)
    # k1 = old - ref = (0.5, -1.0); penalty -0.1 * k1 = (-0.05, 0.1)
    pen = policy.kl_reward(old, ref, "k1", 0.1)
    torch.testing.assert_close(pen, t(-0.05, 0.1), rtol=1e-15, atol=0)
    assert not pen.requires_grad


# ---- GSPO ----------------------------------------------------------------------------------


def test_gspo_ratio_hand_cases():
    # log-ratios (ln 2, 0), both kept: mean ln 2 / 2 -> s = sqrt 2
    s = policy.gspo_ratio(t(LN2 - 1, -2.0), t(-1.0, -2.0), t(1, 1))
    assert s.item() == pytest.approx(math.sqrt(2), rel=1e-15)
    # log-ratios (ln 2, ln 8) with the second masked: s = 2
    s = policy.gspo_ratio(t(LN2, math.log(8)), t(0.0, 0.0), t(1, 0))
    assert s.item() == pytest.approx(2.0, rel=1e-15)
    # (ln 2, ln 8) both kept: exp(2 ln 2) = 4; empty sample: exp(0) = 1
    assert policy.gspo_ratio(t(LN2, math.log(8)), t(0.0, 0.0), t(1, 1)).item() == pytest.approx(4.0)
    assert policy.gspo_ratio(t(), t(), t()).item() == 1.0


def test_gspo_ratio_equals_geometric_mean_of_token_ratios():
    logp, old, _, masks, *_ = _batch(seed=5, lengths=(6, 3, 1, 7))
    for lp, o, m in zip(logp, old, masks):
        kept = m > 0
        # a second route: the product of the kept tokens' ratios, to the power 1/n
        geo = torch.prod(torch.exp(lp[kept] - o[kept])) ** (1.0 / max(int(kept.sum()), 1))
        torch.testing.assert_close(policy.gspo_ratio(lp, o, m), geo, rtol=1e-13, atol=0)


def test_gspo_token_terms_hand():
    old = t(-1.0, -2.0, -0.5)
    mask = t(1, 1, 0)
    # log-ratios (ln 2, 0, 5 [masked]) -> s = sqrt 2 = 1.414214 > 1.2
    lp = t(LN2 - 1, -2.0, 4.5, grad=True)
    # A = +1: every token -1.2 (clipped at 1 + eps_high), no gradient
    pg = policy.gspo_terms(lp, old, t(1, 1, 1), mask, 0.2, 0.2)
    torch.testing.assert_close(pg, t(-1.2, -1.2, -1.2), rtol=1e-15, atol=0)
    assert torch.all(grad_of(pg.sum(), lp)[0] == 0)
    # A = -1: every token s = 1.414214; d/dlogp_t of token t's term is s, of the others 0
    pg = policy.gspo_terms(lp, old, t(-1, -1, -1), mask, 0.2, 0.2)
    torch.testing.assert_close(pg, torch.full((3,), math.sqrt(2), dtype=torch.float64), rtol=1e-15, atol=0)
    w = t(0.5, 2.0, 3.0)
    torch.testing.assert_close(grad_of((w * pg).sum(), lp)[0], w * math.sqrt(2), rtol=1e-14, atol=0)


def _sequence_gspo(logp, old, adv_seq, masks, eps_low, eps_high):
    """The sequence-level objective with s's full gradient (slime, TRL, NeMo-RL): mean_i max(-A s, -A clip(s))."""
    terms = []
    for lp, o, a, m in zip(logp, old, adv_seq, masks):
        s = torch.exp(((lp - o) * m).sum() / max(float(m.sum()), 1.0))
        terms.append(torch.maximum(-a * s, -a * s.clamp(1 - eps_low, 1 + eps_high)))
    return sum(terms) / len(terms)


def test_gspo_token_gradient_equals_sequence_objective_gradient_for_sequence_advantages():
    logp, old, _, masks, *_ = _batch(seed=11, lengths=(5, 2, 4, 3))
    masks = [torch.ones_like(m) for m in masks]
    adv_seq = [1.5, -0.7, 0.4, -2.0]
    adv = [torch.full_like(lp, a) for lp, a in zip(logp, adv_seq)]
    leaves = [lp.clone().requires_grad_(True) for lp in logp]
    gspo = policy.aggregate(
        [policy.gspo_terms(lp, o, a, m, 0.2, 0.2) for lp, o, a, m in zip(leaves, old, adv, masks)],
        masks,
        "seq-mean-token-mean",
    )
    seq = _sequence_gspo(leaves, old, adv_seq, masks, 0.2, 0.2)
    assert gspo.item() == pytest.approx(seq.item(), rel=1e-13)
    g_gspo, g_seq = grad_of(gspo, *leaves), grad_of(seq, *leaves)
    for a, b in zip(g_gspo, g_seq):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)
    assert sum(int((g != 0).sum()) for g in g_gspo) >= 5  # not all clipped: a real comparison


def test_gspo_token_gradient_differs_from_sequence_form_for_token_advantages():
    # per token: GSPO-token gives dL/dlogp_t = -w A_t s; the sequence form gives -w s mean_t(A_t)
    old = t(0.0, 0.0)
    mask = t(1, 1)
    lp = t(0.05, -0.05, grad=True)  # s = exp(0) = 1: inside the band
    adv = t(1.0, 3.0)
    token_form = policy.gspo_terms(lp, old, adv, mask, 0.2, 0.2).sum()
    (g,) = grad_of(token_form, lp)
    torch.testing.assert_close(g, t(-1.0, -3.0), rtol=1e-15, atol=0)
    s = policy.gspo_ratio(lp, old, mask)
    (g_seq,) = grad_of((-adv * s).sum(), lp)
    torch.testing.assert_close(g_seq, t(-2.0, -2.0), rtol=1e-15, atol=0)  # (1 + 3) / 2 per token


# ---- CISPO ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "r, adv, logp, eps_low, eps_high, value, grad",
    [
        # r = 1.5 clipped to 1.2, A = 1, logp = -0.5: loss = -1.2 * 1 * -0.5 = 0.6; gradient -1.2 * 1 = -1.2
        (1.5, 1.0, -0.5, 0.2, 0.2, 0.6, -1.2),
        # r = 0.5 clipped to 0.8, A = -1, logp = -2: loss = -0.8 * -1 * -2 = -1.6; gradient 0.8
        (0.5, -1.0, -2.0, 0.2, 0.2, -1.6, 0.8),
        # no lower bound: weight 0.5; loss = -0.5 * -1 * -2 = -1.0; gradient 0.5
        (0.5, -1.0, -2.0, None, 4.0, -1.0, 0.5),
        # r = 3 under a wide cap (1 + 4 = 5): weight 3, A = 2, logp = -1: loss 6, gradient -6
        (3.0, 2.0, -1.0, None, 4.0, 6.0, -6.0),
    ],
)
def test_cispo_hand_cases(r, adv, logp, eps_low, eps_high, value, grad):
    lp = t(logp, grad=True)
    old = t(logp - math.log(r))
    loss = policy.cispo_terms(lp, old, t(adv), eps_low, eps_high)
    assert loss.item() == pytest.approx(value, rel=1e-12)
    assert grad_of(loss.sum(), lp)[0].item() == pytest.approx(grad, rel=1e-12)


def test_cispo_keeps_the_gradient_ppo_clips_away():
    lp = t(math.log(1.5) - 1.0, grad=True)
    old, adv = t(-1.0), t(1.0)
    assert grad_of(policy.ppo_clip_terms(lp, old, adv, 0.2, 0.2).sum(), lp)[0].item() == 0.0
    assert grad_of(policy.cispo_terms(lp, old, adv, 0.2, 0.2).sum(), lp)[0].item() == pytest.approx(-1.2)


# ---- rollout corrections -------------------------------------------------------------------

# old - rollout = (ln 3, ln 1.5, ln 0.25): token weights (3, 1.5, 0.25)
OLD = t(math.log(3) - 1, math.log(1.5) - 2, math.log(0.25) - 0.5)
ROLLOUT = t(-1.0, -2.0, -0.5)


@pytest.mark.parametrize(
    "mode, level, mask, floor, expected",
    [
        ("tis", "token", (1, 1, 1), None, (2.0, 1.5, 0.25)),  # min(w, 2)
        ("tis", "token", (1, 1, 1), 0.5, (2.0, 1.5, 0.5)),  # clamp(w, 0.5, 2)
        ("mis", "token", (1, 1, 1), None, (0.0, 1.5, 0.25)),  # 3 > 2 dropped
        ("mis", "token", (1, 1, 1), 0.5, (0.0, 1.5, 0.0)),  # 0.25 < 0.5 dropped too
        ("rs", "token", (1, 1, 1), None, (0.0, 1.0, 1.0)),
        # product over the kept tokens: 3 * 1.5 = 4.5 > 2
        ("tis", "sequence", (1, 1, 0), None, (2.0, 2.0, 2.0)),
        ("mis", "sequence", (1, 1, 0), None, (0.0, 0.0, 0.0)),
        ("rs", "sequence", (1, 1, 0), None, (0.0, 0.0, 0.0)),
        # 1.5 * 0.25 = 0.375
        ("tis", "sequence", (0, 1, 1), None, (0.375, 0.375, 0.375)),
        ("mis", "sequence", (0, 1, 1), None, (0.375, 0.375, 0.375)),
        ("mis", "sequence", (0, 1, 1), 0.5, (0.0, 0.0, 0.0)),
        # geometric: sqrt(4.5) = 2.12132 > 2
        ("tis", "geometric", (1, 1, 0), None, (2.0, 2.0, 2.0)),
        ("mis", "geometric", (1, 1, 0), None, (0.0, 0.0, 0.0)),
        ("mis", "geometric", (0, 1, 0), None, (1.5, 1.5, 1.5)),
        ("tis", "sequence", (0, 0, 0), None, (1.0, 1.0, 1.0)),  # nothing kept: exp(0)
    ],
)
def test_rollout_weights_hand_cases(mode, level, mask, floor, expected):
    w = policy.rollout_weights(OLD, ROLLOUT, t(*mask), 2.0, mode, level, floor=floor)
    torch.testing.assert_close(w, t(*expected), rtol=1e-14, atol=1e-15)


def test_rollout_weights_are_detached():
    old = OLD.clone().requires_grad_(True)
    for mode in policy.ROLLOUT_MODES:
        for level in policy.ROLLOUT_LEVELS:
            assert not policy.rollout_weights(old, ROLLOUT, t(1, 1, 1), 2.0, mode, level).requires_grad


def test_masked_token_stays_in_the_denominator():
    # two tokens with r = 1 and A = 1: pg = (-1, -1); rollout weights w = (3, 1), cap 2
    lp = [t(-1.0, -2.0, grad=True)]
    old = [t(-1.0, -2.0)]
    rollout = [t(-1.0 - math.log(3), -2.0)]
    adv, masks = [t(1.0, 1.0)], [t(1, 1)]
    # MIS: (0 * -1 + 1 * -1) / 2 tokens = -0.5 (not -1: the dropped token still counts)
    mis = policy.policy_loss(lp, old, adv, masks, LossOptions(rollout_correction="mis"), rollout=rollout)
    assert mis.item() == pytest.approx(-0.5, rel=1e-14)
    # its gradient: d/dlogp of -w r / 2 = (0, -0.5)
    torch.testing.assert_close(grad_of(mis, lp[0])[0], t(0.0, -0.5), rtol=1e-14, atol=0)
    # TIS: (2 * -1 + 1 * -1) / 2 = -1.5
    tis = policy.policy_loss(lp, old, adv, masks, LossOptions(rollout_correction="tis"), rollout=rollout)
    assert tis.item() == pytest.approx(-1.5, rel=1e-14)


# ---- aggregation ---------------------------------------------------------------------------

VALUES = [t(1, 2, 3, 10), t(4, 8), t(5, 7), t()]
MASKS = [t(1, 1, 1, 0), t(1, 1), t(0, 0), t()]


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 18 / 5),  # (1 + 2 + 3 + 4 + 8) / 5 kept tokens = 3.6
        ("token-sum", 18.0),
        ("seq-mean-token-sum", 18 / 4),  # (6 + 12 + 0 + 0) / 4 samples = 4.5
        ("seq-mean-token-mean", (6 / 3 + 12 / 2) / 4),  # (2 + 6 + 0 + 0) / 4 = 2.0
        ("seq-mean-token-sum-norm", 18 / (4 * 4)),  # horizon 4: 18 / 16 = 1.125
        ("sum-of-sample-mean", 6 / 3 + 12 / 2),  # 8
    ],
)
def test_aggregation_hand_values(mode, expected):
    assert policy.aggregate(VALUES, MASKS, mode, horizon=4).item() == pytest.approx(expected, rel=1e-15)


def test_sum_norm_needs_a_horizon():
    with pytest.raises(ValueError, match="horizon"):
        policy.aggregate(VALUES, MASKS, "seq-mean-token-sum-norm")


@pytest.mark.parametrize("mode", policy.AGGREGATIONS)
def test_all_zero_mask_aggregates_to_zero_with_zero_gradient(mode):
    values = [t(1.5, -2.0, 3.0, grad=True), t(grad=True), t(7.0, grad=True)]
    masks = [t(0, 0, 0), t(), t(0)]
    loss = policy.aggregate(values, masks, mode, horizon=8)
    assert loss.item() == 0.0
    for g in grad_of(loss, *values):
        assert torch.equal(g, torch.zeros_like(g))


@pytest.mark.parametrize("kind", ["ppo", "gspo", "cispo"])
@pytest.mark.parametrize("mode", policy.AGGREGATIONS)
def test_policy_loss_with_all_zero_masks_is_zero_with_zero_gradient(kind, mode):
    logp, old, adv, masks, ref, rollout, entropy = _batch(seed=2)
    masks = [torch.zeros_like(m) for m in masks]
    leaves = [lp.clone().requires_grad_(True) for lp in logp]
    h = [x.clone().requires_grad_(True) for x in entropy]
    opts = LossOptions(
        kind=kind,
        kl_coef=0.3,
        entropy_coef=0.01,
        rollout_correction="tis",
        rollout_level="sequence",
        aggregation=mode,
        horizon=6,
    )
    loss = policy.policy_loss(leaves, old, adv, masks, opts, ref=ref, rollout=rollout, entropy=h)
    assert loss.item() == 0.0
    for g in grad_of(loss, *leaves, *h):
        assert torch.equal(g, torch.zeros_like(g))


def _split_samples(values, masks, cut):
    return (values[:cut], masks[:cut]), (values[cut:], masks[cut:])


@pytest.mark.parametrize("mode", policy.AGGREGATIONS)
def test_aggregation_is_independent_of_how_samples_are_split(mode):
    _, _, _, masks, _, _, values = _batch(seed=7, lengths=(4, 1, 3, 0, 5, 2))
    whole = policy.aggregate(values, masks, mode, horizon=5)
    den = policy.denominator(masks, mode, horizon=5)
    for cut in range(len(values) + 1):
        (va, ma), (vb, mb) = _split_samples(values, masks, cut)
        parts = policy.numerator(va, ma, mode) + policy.numerator(vb, mb, mode)
        torch.testing.assert_close(parts / den, whole, rtol=1e-14, atol=1e-15)
        if mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
            # these normalisers are counts: the halves' denominators add up to the whole's
            assert policy.denominator(ma, mode, 5) + policy.denominator(mb, mode, 5) == pytest.approx(den)


def _cp_chunks(x, n_chunks=2):
    """Zigzag-style: cut a sample into 2 * n_chunks pieces; chunk r holds pieces r and 2 n - 1 - r."""
    pieces = torch.tensor_split(x, 2 * n_chunks)
    return [torch.cat([pieces[r], pieces[2 * n_chunks - 1 - r]]) for r in range(n_chunks)]


@pytest.mark.parametrize("mode", policy.AGGREGATIONS)
def test_aggregation_under_context_parallelism_uses_global_normalisers(mode):
    _, _, _, masks, _, _, values = _batch(seed=9, lengths=(7, 1, 4, 0, 9))
    leaves = [v.clone().requires_grad_(True) for v in values]
    whole = policy.aggregate(leaves, masks, mode, horizon=9)
    tokens = [float(m.sum()) for m in masks]  # each sample's WHOLE count, as every rank must use
    den = policy.denominator(masks, mode, horizon=9)  # the WHOLE batch's normaliser
    ranks = []
    for r in range(2):
        v_r = [_cp_chunks(v)[r] for v in leaves]
        m_r = [_cp_chunks(m)[r] for m in masks]
        ranks.append(policy.numerator(v_r, m_r, mode, sample_tokens=tokens) / den)
    torch.testing.assert_close(ranks[0] + ranks[1], whole, rtol=1e-14, atol=1e-15)
    for a, b in zip(grad_of(whole, *leaves), grad_of(ranks[0] + ranks[1], *leaves)):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=0)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "sum-of-sample-mean"])
def test_rank_local_normalisers_are_wrong(mode):
    # the teeth of the test above: normalising each CP rank by its own counts changes the loss
    _, _, _, masks, _, _, values = _batch(seed=9, lengths=(7, 1, 4, 0, 9))
    whole = policy.aggregate(values, masks, mode)
    local = sum(
        policy.aggregate([_cp_chunks(v)[r] for v in values], [_cp_chunks(m)[r] for m in masks], mode) for r in range(2)
    )
    assert abs(local.item() - whole.item()) > 1e-3


# ---- the composed loss ---------------------------------------------------------------------


def _leaves(xs):
    return [x.clone().requires_grad_(True) for x in xs]


@pytest.mark.parametrize("kl_as, kl_coef", [("loss", 0.0), ("reward", 0.5), ("reward", 0.0)])
def test_kl_adds_no_gradient_at_zero_coef_or_as_reward(kl_as, kl_coef):
    logp, old, adv, masks, ref, *_ = _batch(seed=4)
    leaves = _leaves(logp)
    opts = LossOptions(kl_kind="k3", kl_coef=kl_coef, kl_as=kl_as)
    loss = policy.policy_loss(leaves, old, adv, masks, opts, ref=ref)
    # the PG term alone, composed by hand
    pg = policy.aggregate(
        [policy.ppo_clip_terms(lp, o, a, 0.2, 0.2) for lp, o, a in zip(leaves, old, adv)], masks, "token-mean"
    )
    assert loss.item() == pg.item()
    for a, b in zip(grad_of(loss, *leaves), grad_of(pg, *leaves)):
        assert torch.equal(a, b)


def test_kl_loss_gradient_is_coef_times_mask_over_tokens_for_k1():
    logp, old, adv, masks, ref, *_ = _batch(seed=4)
    leaves = _leaves(logp)
    with_kl = policy.policy_loss(leaves, old, adv, masks, LossOptions(kl_kind="k1", kl_coef=0.5), ref=ref)
    without = policy.policy_loss(leaves, old, adv, masks, LossOptions())
    n = sum(float(m.sum()) for m in masks)
    # d k1 / d logp = 1, token-mean weight m / N: the KL adds 0.5 m / N per token
    for a, b, m in zip(grad_of(with_kl, *leaves), grad_of(without, *leaves), masks):
        torch.testing.assert_close(a - b, 0.5 * m / n, rtol=1e-12, atol=1e-15)


def test_ratio_weighted_kl_adds_the_score_term():
    # one token, on-policy (old = logp): r = 1 but dr/dlogp = 1, so d(r k3)/dlogp = dk3 + k3
    d = 0.4  # logp - ref
    lp = [t(-1.0, grad=True)]
    ref = [t(-1.4)]
    opts = LossOptions(kl_kind="k3", kl_coef=1.0, kl_ratio_weighted=True)
    loss = policy.policy_loss(lp, [t(-1.0)], [t(0.0)], [t(1)], opts, ref=ref)
    k3 = math.exp(-d) + d - 1  # 0.070320
    assert loss.item() == pytest.approx(k3, rel=1e-14)
    assert grad_of(loss, lp[0])[0].item() == pytest.approx((1 - math.exp(-d)) + k3, rel=1e-13)


def test_entropy_term_gradient_and_gate():
    logp, old, adv, masks, _, _, entropy = _batch(seed=6)
    h = _leaves(entropy)
    loss = policy.policy_loss(logp, old, adv, masks, LossOptions(entropy_coef=0.05), entropy=h)
    n = sum(float(m.sum()) for m in masks)
    # token-mean: d loss / d H_t = -0.05 m_t / N
    for g, m in zip(grad_of(loss, *h), masks):
        torch.testing.assert_close(g, -0.05 * m / n, rtol=1e-13, atol=1e-16)
    off = policy.policy_loss(logp, old, adv, masks, LossOptions(entropy_coef=0.0), entropy=h)
    assert not off.requires_grad  # coefficient 0: the entropy has no path into the loss


def _gradcheck_loss(opts, logp, old, adv, masks, entropy=None, **kw):
    """gradcheck of ``policy_loss`` w.r.t. every sample's log-probs (and the entropy, when given)."""
    n = len(logp)

    def f(*flat):
        h = list(flat[n:]) if entropy is not None else None
        return policy.policy_loss(list(flat[:n]), old, adv, masks, opts, entropy=h, **kw)

    inputs = tuple(_leaves(logp)) + (tuple(_leaves(entropy)) if entropy is not None else ())
    return torch.autograd.gradcheck(f, inputs)


# log-ratios kept at least 0.02 from the clip edges ln 0.8 = -0.223 and ln 1.2 = 0.182, and from ln 3 = 1.099
GC_LOG_RATIOS = [t(0.05, -0.4, 0.3, 1.5, -0.1), t(-0.15), t(0.12, 0.9, -0.6, 2.0)]
GC_ADV = [t(1.0, -0.5, -1.5, -2.0, 0.7), t(1.2), t(-0.3, 0.8, 0.4, -1.1)]
GC_MASKS = [t(1, 1, 0, 1, 1), t(1), t(1, 1, 1, 0)]


@pytest.mark.parametrize("mode", policy.AGGREGATIONS)
@pytest.mark.parametrize("correction", [None, "tis", "mis"])
def test_ppo_policy_loss_gradcheck(mode, correction):
    old = [t(*([-1.0] * len(r))) for r in GC_LOG_RATIOS]
    logp = [o + r for o, r in zip(old, GC_LOG_RATIOS)]
    ref = [lp + 0.3 for lp in logp]
    rollout = [o - 0.5 * r for o, r in zip(old, GC_LOG_RATIOS)]
    entropy = [torch.linspace(0.1, 1.0, len(r), dtype=torch.float64) for r in GC_LOG_RATIOS]
    opts = LossOptions(
        eps_high=0.2,
        dual_clip_c=3.0,
        kl_kind="k3",
        kl_coef=0.2,
        entropy_coef=0.05,
        rollout_correction=correction,
        aggregation=mode,
        horizon=6,
    )
    assert _gradcheck_loss(opts, logp, old, GC_ADV, GC_MASKS, ref=ref, rollout=rollout, entropy=entropy)


def test_gspo_policy_loss_gradcheck_with_sequence_advantages():
    # with per-sample advantages and seq-mean-token-mean, GSPO-token's gradient IS its value's gradient
    old = [t(*([-1.0] * len(r))) for r in GC_LOG_RATIOS]
    logp = [o + r for o, r in zip(old, GC_LOG_RATIOS)]
    # mean kept log-ratios: (0.05 - 0.4 + 1.5 - 0.1) / 4 = 0.2625 (s = 1.300: clipped, A = +1),
    # -0.15 (s = 0.861, inside), (0.12 + 0.9 - 0.6) / 3 = 0.14 (s = 1.150, inside)
    adv = [torch.full_like(r, a) for r, a in zip(GC_LOG_RATIOS, (1.0, 0.5, -2.0))]
    opts = LossOptions(kind="gspo", aggregation="seq-mean-token-mean")
    assert _gradcheck_loss(opts, logp, old, adv, GC_MASKS)


def test_gradcheck_from_the_logits():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 5, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 5, (6,), generator=g)
    old = token.log_probs(logits.detach(), targets) + torch.tensor([0.1, -0.1, 0.05, 0.3, -0.02, 0.0]).double()
    masks = [t(1, 1, 0, 1), t(1, 1)]
    adv = [t(1.0, -1.0, 0.5, 2.0), t(-0.5, 0.3)]
    opts = LossOptions(dual_clip_c=3.0, aggregation="seq-mean-token-mean")

    def f(z):
        lp = token.log_probs(z, targets)
        return policy.policy_loss([lp[:4], lp[4:]], [old[:4], old[4:]], adv, masks, opts)

    assert torch.autograd.gradcheck(f, (logits,))


def test_matches_the_existing_ppo_oracle():
    # oracles.losses.policy_loss is PPO-clip reduced by the sum of sample means, minus the entropy bonus
    logp, old, adv, masks, _, _, entropy = _batch(seed=8)
    leaves = _leaves(logp)
    opts = LossOptions(eps_low=0.2, eps_high=0.28, entropy_coef=0.01, aggregation="sum-of-sample-mean")
    ours = policy.policy_loss(leaves, old, adv, masks, opts, entropy=entropy)
    theirs = losses.policy_loss(leaves, old, adv, masks, entropy, eps_clip=0.2, eps_clip_high=0.28, entropy_coef=0.01)
    torch.testing.assert_close(ours, theirs, rtol=1e-14, atol=1e-15)
    for a, b in zip(grad_of(ours, *leaves), grad_of(theirs, *leaves)):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kind": "ppo2"}, "kind"),
        ({"dual_clip_c": 1.0}, "dual_clip_c"),
        ({"kind": "cispo", "dual_clip_c": 3.0}, "cispo"),
        ({"eps_low": None}, "eps_low"),
        ({"kl_kind": "k4"}, "kl_kind"),
        ({"kl_as": "advantage"}, "kl_as"),
        ({"rollout_correction": "is"}, "rollout_correction"),
        ({"rollout_level": "batch"}, "rollout_level"),
        ({"aggregation": "mean"}, "aggregation"),
    ],
)
def test_loss_options_reject_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossOptions(**kwargs)


def test_loss_options_are_frozen():
    with pytest.raises(AttributeError):
        LossOptions().kl_coef = 1.0
