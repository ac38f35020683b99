"""Self-tests of ``oracles/sampling.py`` (docs/sampling.md) against hand-worked numbers and torch.

Independent means: ``torch.log_softmax`` on the full row, numbers worked out in
the comments, docs/sampling.md's closed-form gradients, and ``gradcheck``.
"""

import math

import pytest
import torch

from oracles import sampling as S

LN = math.log


def _row(*values):
    return torch.tensor([values], dtype=torch.float64)


def _ids(mask):
    return [row.nonzero().flatten().tolist() for row in mask]


def _random(rows=4, vocab=9, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g, dtype=torch.float64) * scale
    return logits, torch.randint(0, vocab, (rows,), generator=g)


# ---- values by hand ---------------------------------------------------------------


@pytest.mark.parametrize("tau", [1.0, 2.0, 0.5])
def test_hand_worked_values(tau):
    # x = tau * log([1, 2, 3, 4]): p = [.1, .2, .3, .4] at every tau.
    # K = {2, 3}: p~ = [3/7, 4/7], log p~_3 = log(4/7), S = 0.7, log p_3 = log 0.4 = log p~_3 + log S.
    x = tau * _row(LN(1), LN(2), LN(3), LN(4))
    kept = torch.tensor([[False, False, True, True]])
    t = torch.tensor([3])
    assert S.processed_log_probs(x, t, kept, tau).item() == pytest.approx(LN(4 / 7), abs=1e-15)
    h = -(3 / 7 * LN(3 / 7) + 4 / 7 * LN(4 / 7))  # 0.6829081047004717
    assert S.processed_entropy(x, kept, tau).item() == pytest.approx(h, abs=1e-15)
    full = torch.log_softmax(x / tau, -1)[0, 3].item()
    assert full == pytest.approx(LN(0.4), abs=1e-15)
    assert S.processed_log_probs(x, t, kept, tau).item() - full == pytest.approx(-LN(0.7), abs=1e-15)


def test_full_vocabulary_is_plain_log_softmax():
    for seed, tau in [(0, 1.0), (1, 0.7), (2, 1.9)]:
        x, t = _random(seed=seed)
        kept = torch.ones_like(x, dtype=torch.bool)
        ref = torch.log_softmax(x / tau, -1)
        torch.testing.assert_close(S.processed_log_probs(x, t, kept, tau), ref.gather(1, t[:, None]).squeeze(1))
        torch.testing.assert_close(S.processed_entropy(x, kept, tau), -(ref.exp() * ref).sum(-1))


def test_single_kept_token_gives_zero_and_zero_gradient():
    x, t = _random(seed=3)
    kept = torch.zeros_like(x, dtype=torch.bool)
    kept[torch.arange(x.shape[0]), t] = True
    x.requires_grad_(True)
    lp = S.processed_log_probs(x, t, kept, 1.3)
    h = S.processed_entropy(x, kept, 1.3)
    assert torch.equal(lp.detach(), torch.zeros(x.shape[0], dtype=torch.float64))
    assert torch.equal(h.detach(), torch.zeros(x.shape[0], dtype=torch.float64))
    (g,) = torch.autograd.grad(lp.sum() + h.sum(), x)
    assert torch.equal(g, torch.zeros_like(g))  # d/dz (z_t - z_t) = 0; H~ = 0 identically


# ---- deriving K ---------------------------------------------------------------------


def test_top_k_ties_follow_the_documented_rules():
    x = _row(1.0, 3.0, 3.0, 3.0, 0.0)
    # k = 2: the 2nd largest value is 3, tied by columns 1, 2, 3.
    assert _ids(S.top_k_mask(x, 2)) == [[1, 2, 3]]  # "all": every column >= the k-th value (vLLM's torch path)
    assert _ids(S.top_k_mask(x, 2, ties="lowest_id")) == [[1, 2]]  # exactly k, lowest ids first (vLLM's Triton)
    assert _ids(S.top_k_mask(x, 4)) == [[0, 1, 2, 3]]
    assert _ids(S.top_k_mask(x, 5)) == _ids(S.top_k_mask(x, 99)) == [[0, 1, 2, 3, 4]]  # k >= V keeps all
    assert _ids(S.top_k_mask(_row(2.0, -math.inf, 1.0), 3)) == [[0, 2]]  # a -inf logit is never kept


def test_top_p_boundary_hand_made():
    # p = [.4, .3, .2, .1]; mass ranked before each: [0, .4, .7, .9]; kept iff < top_p.
    x = _row(LN(0.2), LN(0.4), LN(0.1), LN(0.3))  # columns shuffled: descending order is 1, 3, 0, 2
    assert _ids(S.top_p_mask(x, 0.35)) == [[1]]
    assert _ids(S.top_p_mask(x, 0.6)) == [[1, 3]]  # .4 < .6: column 3 crosses .6 and is kept
    assert _ids(S.top_p_mask(x, 0.75)) == [[0, 1, 3]]
    assert _ids(S.top_p_mask(x, 0.95)) == [[0, 1, 2, 3]]
    assert _ids(S.top_p_mask(x, 1.0)) == [[0, 1, 2, 3]]


def test_top_p_mass_reaching_p_exactly_ends_the_prefix():
    # z = ln2 * [2, 1, 0, 0]: softmax is exactly [.5, .25, .125, .125] in float64.
    x = LN(2) * _row(2.0, 1.0, 0.0, 0.0)
    assert torch.softmax(x, -1).tolist() == [[0.5, 0.25, 0.125, 0.125]]
    assert _ids(S.top_p_mask(x, 0.5)) == [[0]]  # mass .5 reaches .5: nothing more
    assert _ids(S.top_p_mask(x, 0.5 + 1e-12)) == [[0, 1]]
    assert _ids(S.top_p_mask(x, 0.75)) == [[0, 1]]


def test_top_p_ties_at_the_boundary():
    # p = [.4, .2, .2, .2], top_p = .5: mass before the tied .2's is .4 < .5.
    x = _row(LN(0.4), LN(0.2), LN(0.2), LN(0.2))
    assert _ids(S.top_p_mask(x, 0.5)) == [[0, 1, 2, 3]]  # "all": every tie of the crossing value
    assert _ids(S.top_p_mask(x, 0.5, ties="lowest_id")) == [[0, 1]]  # the crossing copy only
    assert _ids(S.top_p_mask(x, 0.3)) == [[0]]


def test_temperature_changes_top_p_and_min_p_but_not_top_k():
    x = _row(0.0, -1.0, -2.0)
    # tau 1: p ∝ [1, e^-1, e^-2] = [.665, .245, .090]; tau 2: ∝ [1, e^-.5, e^-1] = [.506, .307, .186]
    assert _ids(S.top_p_mask(x, 0.6, 1.0)) == [[0]]
    assert _ids(S.top_p_mask(x, 0.6, 2.0)) == [[0, 1]]
    # min-p .2: ratios p_v / p_max are e^-1 = .37, e^-2 = .14 at tau 1; e^-.5, e^-1 at tau 2
    assert _ids(S.min_p_mask(x, 0.2, 1.0)) == [[0, 1]]
    assert _ids(S.min_p_mask(x, 0.2, 2.0)) == [[0, 1, 2]]
    # derive_kept hands tau to both filters
    assert _ids(S.derive_kept(x, 1.0, min_p=0.2)) == [[0, 1]]
    assert _ids(S.derive_kept(x, 2.0, min_p=0.2)) == [[0, 1, 2]]
    assert _ids(S.derive_kept(x, 1.0, top_p=0.6)) == [[0]]
    assert _ids(S.derive_kept(x, 2.0, top_p=0.6)) == [[0, 1]]
    assert _ids(S.top_k_mask(x, 2)) == _ids(S.derive_kept(x, 0.1, top_k=2)) == _ids(S.derive_kept(x, 9.0, top_k=2))


def test_min_p_keeps_equality():
    x = LN(2) * _row(2.0, 1.0, 0.0)  # ratios to the max: 1, .5, .25 exactly
    assert _ids(S.min_p_mask(x, 0.5)) == [[0, 1]]
    assert _ids(S.min_p_mask(x, 0.5 + 1e-12)) == [[0]]
    assert _ids(S.min_p_mask(x, 0.0)) == [[0, 1, 2]]
    assert _ids(S.min_p_mask(_row(1.0, 1.0, 0.0), 1.0)) == [[0, 1]]  # min_p 1: the tied maxima


def test_derive_kept_uses_vllms_order():
    x = _row(LN(0.4), LN(0.3), LN(0.2), LN(0.1))
    # top-k 2 first -> {0, 1}, renormalised [4/7, 3/7]; top-p .5: mass before column 1 is .571 -> {0}.
    # (top-p on the full row first would keep {0, 1}: mass before column 1 is .4.)
    assert _ids(S.derive_kept(x, top_k=2, top_p=0.5)) == [[0]]
    # min-p .6 first: ratios .75, .5, .25 -> {0, 1}; top-p .5 over [4/7, 3/7] -> {0}.
    assert _ids(S.derive_kept(x, min_p=0.6, top_p=0.5)) == [[0]]
    # each filter alone
    assert _ids(S.derive_kept(x, top_p=0.5)) == [[0, 1]]
    assert _ids(S.derive_kept(x, min_p=0.6)) == [[0, 1]]
    assert _ids(S.derive_kept(x)) == [[0, 1, 2, 3]]
    assert _ids(S.derive_kept(_row(0.0, -math.inf, 1.0))) == [[0, 2]]


def test_derive_kept_is_a_global_rule_on_the_values():
    # ties="all" depends on the values only: permuting the columns permutes K.
    x, _ = _random(rows=6, vocab=12, seed=5)
    x[:, 3] = x[:, 7]  # a tie somewhere
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    for kwargs in [dict(top_k=3), dict(top_p=0.7), dict(min_p=0.1, top_k=5, top_p=0.9)]:
        kept = S.derive_kept(x, 0.8, **kwargs)
        assert torch.equal(S.derive_kept(x[:, perm], 0.8, **kwargs), kept[:, perm])


# ---- gradients ----------------------------------------------------------------------


def _some_kept(x, t, seed=7):
    g = torch.Generator().manual_seed(seed)
    kept = torch.rand(x.shape, generator=g) < 0.5
    kept[torch.arange(x.shape[0]), t] = True
    return kept


@pytest.mark.parametrize("tau", [1.0, 0.6])
def test_gradients_zero_outside_k_and_match_the_closed_forms(tau):
    x, t = _random(seed=11)
    kept = _some_kept(x, t)
    x.requires_grad_(True)
    (g_lp,) = torch.autograd.grad(S.processed_log_probs(x, t, kept, tau).sum(), x)
    (g_h,) = torch.autograd.grad(S.processed_entropy(x, kept, tau).sum(), x)
    assert torch.equal(g_lp[~kept], torch.zeros_like(g_lp[~kept]))
    assert torch.equal(g_h[~kept], torch.zeros_like(g_h[~kept]))
    # docs/sampling.md: d log p~_t / dx_v = (1[v=t] - p~_v) / tau, d H~ / dx_v = -p~_v (log p~_v + H~) / tau on K
    z = (x.detach() / tau).masked_fill(~kept, -math.inf)
    p = torch.softmax(z, -1)
    log_p = torch.log_softmax(z, -1).masked_fill(~kept, 0.0)
    h = -(p * log_p).sum(-1, keepdim=True)
    onehot = torch.nn.functional.one_hot(t, x.shape[1]).double()
    torch.testing.assert_close(g_lp, (onehot - p) / tau)
    torch.testing.assert_close(g_h, -p * (log_p + h) / tau)


def test_gradcheck_inside_k():
    x, t = _random(rows=3, vocab=6, seed=13)
    kept = _some_kept(x, t, seed=2)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a: S.processed_log_probs(a, t, kept, 0.8), (x,))
    assert torch.autograd.gradcheck(lambda a: S.processed_entropy(a, kept, 0.8), (x,))


def test_minus_inf_logit_inside_k_has_zero_term_and_zero_gradient():
    x = _row(LN(1), LN(3), -math.inf).requires_grad_(True)
    kept = torch.ones(1, 3, dtype=torch.bool)
    lp = S.processed_log_probs(x, torch.tensor([1]), kept)
    h = S.processed_entropy(x, kept)
    assert lp.item() == pytest.approx(LN(0.75), abs=1e-15)
    assert h.item() == pytest.approx(-(0.25 * LN(0.25) + 0.75 * LN(0.75)), abs=1e-15)
    (g,) = torch.autograd.grad(lp.sum() + h.sum(), x)
    assert torch.isfinite(g).all() and g[0, 2] == 0


# ---- the two engine forms and the target rule -----------------------------------------


def test_csr_and_dense_give_the_same_k():
    vocab, tp = 8, 2
    ids = [1, 5, 6, 0, 2, 3, 4, 5, 6, 7, 7]
    offsets = [0, 3, 3, 10, 11]  # rows: {1,5,6}, {}, {0,2..7}, {7}
    csr = S.kept_from_csr(ids, offsets, vocab)
    assert _ids(csr) == [[1, 5, 6], [], [0, 2, 3, 4, 5, 6, 7], [7]]
    # slime's construction: each TP rank marks the ids of its slice [r V_local, (r+1) V_local)
    v_local = vocab // tp
    local = [torch.zeros(4, v_local, dtype=torch.bool) for _ in range(tp)]
    for row in range(4):
        for token in ids[offsets[row] : offsets[row + 1]]:
            local[token // v_local][row, token % v_local] = True
    assert torch.equal(S.kept_from_dense(local), csr)
    # and a derived K survives CSR round trip
    x, _ = _random(rows=5, vocab=vocab, seed=4)
    kept = S.derive_kept(x, 0.9, top_p=0.8)
    nz = kept.nonzero()
    counts = kept.sum(-1)
    csr_offsets = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    assert torch.equal(S.kept_from_csr(nz[:, 1], csr_offsets, vocab), kept)
    assert torch.equal(S.kept_from_dense(list(kept.chunk(tp, dim=-1))), kept)


def test_target_outside_k():
    # p ∝ [1, 2, 3, 4]; K = {2, 3}; target 1 is outside.
    x = _row(LN(1), LN(2), LN(3), LN(4))
    kept = torch.tensor([[False, False, True, True]])
    t = torch.tensor([1])
    assert S.target_outside(kept, t).tolist() == [True]
    assert S.target_outside(kept, torch.tensor([3])).tolist() == [False]
    with pytest.raises(ValueError, match="targets outside kept"):
        S.processed_log_probs(x, t, kept)
    # force-keep (slime): K u {1} = {1, 2, 3}, mass 9: log(2/9)
    assert _ids(S.force_keep(kept, t)) == [[1, 2, 3]]
    assert S.processed_log_probs(x, t, kept, on_outside="force_keep").item() == pytest.approx(LN(2 / 9), abs=1e-15)
    # neg_inf (NeMo-RL's masked log_softmax): -inf, gradient 0
    xg = x.clone().requires_grad_(True)
    lp = S.processed_log_probs(xg, t, kept, on_outside="neg_inf")
    assert lp.item() == -math.inf
    (g,) = torch.autograd.grad(lp.sum(), xg)
    assert torch.equal(g, torch.zeros_like(g))
    # with the target inside K the three rules agree
    t3 = torch.tensor([3])
    values = {S.processed_log_probs(x, t3, kept, on_outside=rule).item() for rule in S.ON_OUTSIDE}
    assert values == {S.processed_log_probs(x, t3, kept).item()}


# ---- bad input ------------------------------------------------------------------------

_ALL2 = torch.ones(1, 2, dtype=torch.bool)
_NONE2 = torch.zeros(1, 2, dtype=torch.bool)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: S.kept_from_csr([1, 2], [0, 2, 1, 2], 4), "offsets"),  # not monotone
        (lambda: S.kept_from_csr([1, 2], [1, 2], 4), "offsets"),  # does not start at 0
        (lambda: S.kept_from_csr([1, 2], [0, 1], 4), "offsets"),  # does not end at len(ids)
        (lambda: S.kept_from_csr([1, 4], [0, 2], 4), "ids"),  # id == vocab
        (lambda: S.kept_from_csr([-1], [0, 1], 4), "ids"),
        (lambda: S.kept_from_csr([1], [0, 1], 0), "vocab"),
        (lambda: S.kept_from_dense([]), "local_masks"),
        (lambda: S.kept_from_dense([torch.ones(2, 3).bool(), torch.ones(3, 3).bool()]), "local_masks"),
        (lambda: S.kept_from_dense([torch.ones(2, 3)]), "local_masks"),
        (lambda: S.top_k_mask(_row(1.0, 2.0), 0), "k"),
        (lambda: S.top_k_mask(_row(1.0, 2.0), -1), "k"),
        (lambda: S.derive_kept(_row(1.0, 2.0), top_k=0), "top_k"),
        (lambda: S.top_p_mask(_row(1.0, 2.0), 0.0), "p"),
        (lambda: S.top_p_mask(_row(1.0, 2.0), 1.1), "p"),
        (lambda: S.derive_kept(_row(1.0, 2.0), top_p=-0.1), "top_p"),
        (lambda: S.min_p_mask(_row(1.0, 2.0), -0.1), "min_p"),
        (lambda: S.derive_kept(_row(1.0, 2.0), min_p=1.5), "min_p"),
        (lambda: S.top_p_mask(_row(1.0, 2.0), 0.5, temperature=0.0), "temperature"),
        (lambda: S.derive_kept(_row(1.0, 2.0), temperature=-1.0), "temperature"),
        (lambda: S.top_k_mask(_row(1.0, 2.0), 1, ties="first"), "ties"),
        (lambda: S.top_k_mask(_row(1.0, math.nan), 1), "logits"),
        (lambda: S.derive_kept(_row(-math.inf, -math.inf), top_k=1), "logits"),
        (lambda: S.processed_entropy(_row(1.0, 2.0), torch.ones(1, 3, dtype=torch.bool)), "kept"),
        (lambda: S.processed_entropy(_row(1.0, 2.0), _NONE2), "kept"),
        (lambda: S.processed_entropy(_row(1.0, -math.inf), torch.tensor([[False, True]])), "kept"),
        (lambda: S.processed_log_probs(_row(1.0, 2.0), torch.tensor([2]), _ALL2), "targets"),
        (lambda: S.processed_log_probs(_row(1.0, 2.0), torch.tensor([0]), _ALL2, on_outside="x"), "on_outside"),
        (lambda: S.force_keep(_ALL2, torch.tensor([0, 1])), "targets"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()
