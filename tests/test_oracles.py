"""Self-tests of the float64 oracles against independent computations (docs/math.md).

Independent means: torch's own float64 ``log_softmax``, finite differences,
docs/math.md's closed-form gradients, and numbers worked out by hand in comments.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import oracles
from oracles import layout, losses, token


def _random(rows=5, vocab=7, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g, dtype=torch.float64) * scale
    return logits, torch.randint(0, vocab, (rows,), generator=g)


def _torch_reference(logits, targets, temperature=1.0):
    log_p = torch.log_softmax(logits.double() / temperature, dim=-1)
    return log_p.gather(1, targets[:, None]).squeeze(1), -(log_p.exp() * log_p).sum(-1)


# ---- per-token values ------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.6, 3.0])
@pytest.mark.parametrize("shape", [(5, 7), (1, 1), (3, 2), (4, 257)])
def test_values_match_float64_log_softmax(temperature, shape):
    logits, targets = _random(*shape, seed=sum(shape))
    expected_lp, expected_h = _torch_reference(logits, targets, temperature)
    torch.testing.assert_close(token.log_probs(logits, targets, temperature), expected_lp, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(token.entropy(logits, temperature), expected_h, rtol=1e-12, atol=1e-12)


def test_outputs_are_float64_whatever_the_input_dtype():
    logits, targets = _random()
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        assert token.log_probs(logits.to(dtype), targets).dtype == torch.float64
        assert token.entropy(logits.to(dtype)).dtype == torch.float64


def test_uniform_row_by_hand():
    # V equal logits: p = 1/V, so l = -log V and H = log V.
    logits = torch.full((2, 6), 1.25, dtype=torch.float64)
    targets = torch.tensor([0, 5])
    torch.testing.assert_close(token.log_probs(logits, targets), torch.full((2,), -math.log(6), dtype=torch.float64))
    torch.testing.assert_close(token.entropy(logits), torch.full((2,), math.log(6), dtype=torch.float64))


def test_huge_magnitudes_stay_finite():
    logits, targets = _random(scale=1e4)
    logits[::2] += 3e4
    x = logits.clone().requires_grad_()
    (token.log_probs(x, targets).sum() + token.entropy(x).sum()).backward()
    assert torch.isfinite(token.log_probs(logits, targets)).all()
    assert torch.isfinite(token.entropy(logits)).all()
    assert torch.isfinite(x.grad).all()
    expected_lp, expected_h = _torch_reference(logits, targets)
    torch.testing.assert_close(token.log_probs(logits, targets), expected_lp, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(token.entropy(logits), expected_h, rtol=1e-12, atol=1e-9)


# ---- per-token gradients ---------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.8, 2.5])
def test_gradients_match_finite_differences(temperature):
    logits, targets = _random(rows=3, vocab=4)
    a, b = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)

    def loss(x):
        return (a * token.log_probs(x, targets, temperature)).sum() + (b * token.entropy(x, temperature)).sum()

    assert torch.autograd.gradcheck(loss, (logits.clone().requires_grad_(),))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_gradients_match_closed_forms(temperature):
    # docs/math.md: dl/dz_v = 1[v=t] - p_v; dH/dz_v = -p_v (log p_v + H); d/dlogits = (1/tau) d/dz.
    logits, targets = _random()
    g = torch.Generator().manual_seed(1)
    g_l, g_h = torch.randn(5, generator=g, dtype=torch.float64), torch.randn(5, generator=g, dtype=torch.float64)
    x = logits.clone().requires_grad_()
    entropy = token.entropy(x, temperature)
    ((g_l * token.log_probs(x, targets, temperature)).sum() + (g_h * entropy).sum()).backward()
    p = torch.softmax(logits / temperature, -1)
    one_hot = torch.nn.functional.one_hot(targets, 7).double()
    closed = g_l[:, None] * (one_hot - p) - g_h[:, None] * p * (p.log() + entropy.detach()[:, None])
    torch.testing.assert_close(x.grad, closed / temperature, rtol=1e-12, atol=1e-14)


# ---- -inf columns ----------------------------------------------------------------

KEPT = [0, 2, 3, 5, 6]  # columns 1 and 4 are masked to -inf


def _masked_case(scale=3.0):
    logits, targets = _random(scale=scale)
    masked = logits.clone()
    masked[:, [1, 4]] = -math.inf
    targets = torch.where((targets == 1) | (targets == 4), torch.zeros_like(targets), targets)
    remap = torch.tensor([0, 0, 1, 2, 0, 3, 4])[targets]
    return logits, masked, targets, remap


@pytest.mark.parametrize("scale", [3.0, 1e4])
def test_neg_inf_columns_equal_the_row_without_them(scale):
    logits, masked, targets, remap = _masked_case(scale)
    masked[0, KEPT] -= 3e4  # lse far below 0: exp(-lse) overflows in any discarded where-branch
    logits[0] -= 3e4
    x, y = masked.clone().requires_grad_(), logits[:, KEPT].clone().requires_grad_()
    (token.log_probs(x, targets, 0.9).sum() + 2 * token.entropy(x, 0.9).sum()).backward()
    (token.log_probs(y, remap, 0.9).sum() + 2 * token.entropy(y, 0.9).sum()).backward()
    assert torch.isfinite(token.entropy(masked)).all() and torch.isfinite(token.log_probs(masked, targets)).all()
    assert torch.isfinite(x.grad).all() and bool((x.grad[:, [1, 4]] == 0).all())
    torch.testing.assert_close(token.entropy(masked, 0.9), token.entropy(y.detach(), 0.9), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(token.log_probs(masked, targets, 0.9), token.log_probs(y.detach(), remap, 0.9))
    torch.testing.assert_close(x.grad[:, KEPT], y.grad, rtol=1e-12, atol=1e-12)


def test_neg_inf_columns_pass_gradcheck():
    _, masked, targets, _ = _masked_case()
    masked, targets = masked[:2], targets[:2]

    def loss(x):
        return token.log_probs(x, targets).sum() - 0.5 * token.entropy(x).sum()

    assert torch.autograd.gradcheck(loss, (masked.clone().requires_grad_(),))


def test_one_finite_column_is_a_point_mass():
    logits = torch.full((1, 4), -math.inf, dtype=torch.float64)
    logits[0, 2] = 5.0
    x = logits.clone().requires_grad_()
    (token.log_probs(x, torch.tensor([2])) + token.entropy(x)).sum().backward()
    assert float(token.log_probs(logits, torch.tensor([2]))) == 0.0
    assert float(token.entropy(logits)) == 0.0
    assert bool((x.grad == 0).all())


# ---- naive same-dtype references -------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_naive_stays_in_input_dtype_and_is_close(dtype):
    logits, targets = _random(rows=6, vocab=33)
    low = logits.to(dtype)
    x = low.clone().requires_grad_()
    lp, h = token.naive_log_probs(x, targets, 0.7), token.naive_entropy(x, 0.7)
    assert lp.dtype == dtype and h.dtype == dtype
    (lp.sum() + h.sum()).backward()
    assert x.grad.dtype == dtype and torch.isfinite(x.grad).all()
    tolerance = {torch.float32: 1e-5, torch.bfloat16: 0.1, torch.float16: 2e-2}[dtype]
    torch.testing.assert_close(lp.double(), token.log_probs(low, targets, 0.7), rtol=0, atol=tolerance)
    torch.testing.assert_close(h.double(), token.entropy(low, 0.7), rtol=0, atol=tolerance)


def test_naive_in_float64_equals_the_oracle_and_handles_neg_inf():
    logits, masked, targets, _ = _masked_case()
    torch.testing.assert_close(token.naive_log_probs(logits, targets, 1.3), token.log_probs(logits, targets, 1.3))
    torch.testing.assert_close(token.naive_entropy(masked, 1.3), token.entropy(masked, 1.3))
    x = masked.float().requires_grad_()
    (token.naive_log_probs(x, targets).sum() + token.naive_entropy(x).sum()).backward()
    assert torch.isfinite(x.grad).all() and bool((x.grad[:, [1, 4]] == 0).all())


# ---- layout ------------------------------------------------------------------------


def test_layout_hand_worked_examples():
    # T = [3, 5], R = [1, 3] -> P = [2, 2]; response positions [P-1, T-1): [1, 2) and [1, 4).
    # thd: off = [0, 3] -> rows [1] and [4, 5, 6]; 8 tokens, already a multiple of 4.
    assert layout.response_rows([3, 5], [1, 3], "thd", 4) == [[1], [4, 5, 6]]
    assert layout.stream_rows([3, 5], "thd", 4) == layout.thd_stream_length([3, 5], 4) == 8
    # bshd: S = ceil(5 / 4) * 4 = 8 -> rows [0 + 1] and [8 + 1, 8 + 4) = [9, 10, 11]; 2 * 8 rows.
    assert layout.bshd_seq_len([3, 5], 4) == 8
    assert layout.response_rows([3, 5], [1, 3], "bshd", 4) == [[1], [9, 10, 11]]
    assert layout.stream_rows([3, 5], "bshd", 4) == 16
    # pad_multiple 3: thd 8 -> 9 rows; bshd S = 6 -> rows [1] and [7, 8, 9], 12 rows.
    assert layout.response_rows([3, 5], [1, 3], "thd", 3) == [[1], [4, 5, 6]]
    assert layout.stream_rows([3, 5], "thd", 3) == 9
    assert layout.response_rows([3, 5], [1, 3], "bshd", 3) == [[1], [7, 8, 9]]
    assert layout.stream_rows([3, 5], "bshd", 3) == 12


@pytest.mark.parametrize("qkv_format", ["thd", "bshd"])
def test_layout_edge_cases(qkv_format):
    assert layout.response_rows([4, 1], [0, 0], qkv_format, 1) == [[], []]  # R = 0: nothing predicted
    assert layout.response_rows([2], [1], qkv_format, 1) == [[0]]  # P = 1: row 0 predicts y[1]
    assert layout.response_rows([4], [3], qkv_format, 8) == [[0, 1, 2]]  # P = 1, whole response
    assert layout.response_rows([], [], qkv_format, 4) == []
    assert layout.stream_rows([], qkv_format, 4) == 0


def test_padded_length_and_empty_stream():
    assert [layout.padded_length(n, 4) for n in (0, 1, 4, 5)] == [0, 4, 4, 8]
    assert layout.padded_length(7, 1) == 7
    assert layout.bshd_seq_len([], 4) == 0 and layout.thd_stream_length([], 4) == 0


def test_sample_position_of_row_by_hand():
    # thd [3, 5] pad 3: rows 0-2 sample 0, rows 3-7 sample 1, row 8 padding.
    thd = [layout.sample_position_of_row(r, [3, 5], "thd", 3) for r in range(9)]
    assert thd == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3), (1, 4), None]
    # bshd [3, 5] pad 4, S = 8: row 5 is sample 0's padding, row 12 is sample 1 position 4.
    assert layout.sample_position_of_row(5, [3, 5], "bshd", 4) is None
    assert layout.sample_position_of_row(12, [3, 5], "bshd", 4) == (1, 4)


def test_response_targets_by_hand():
    tokens = [torch.tensor([10, 11, 12]), torch.tensor([20, 21]), torch.tensor([30, 31, 32, 33])]
    picked = layout.response_targets(tokens, [1, 0, 3])
    assert [t.tolist() for t in picked] == [[12], [], [31, 32, 33]]


BAD_LAYOUT_ARGUMENTS = [
    # (function, args, word the ValueError must name)
    (layout.response_rows, ([3], [3], "thd", 1), "response_lengths"),  # P = 0
    (layout.response_rows, ([3], [-1], "thd", 1), "response_lengths"),
    (layout.response_rows, ([3], [1, 1], "thd", 1), "response_lengths"),
    (layout.response_rows, ([3, 2], [1], "bshd", 1), "total_lengths"),
    (layout.response_rows, ([3], [1], "sbhd", 1), "qkv_format"),
    (layout.response_rows, ([3], [1], "thd", 0), "pad_multiple"),
    (layout.response_rows, ([3], [1], "bshd", 0), "pad_multiple"),
    (layout.stream_rows, ([3], "thd", 0), "pad_multiple"),
    (layout.stream_rows, ([3], "bhsd", 1), "qkv_format"),
    (layout.padded_length, (3, 0), "pad_multiple"),
    (layout.response_targets, ([torch.arange(3)], [1, 1]), "response_lengths"),
    (layout.sample_position_of_row, (8, [3, 5], "thd", 1), "row"),
]


@pytest.mark.parametrize("function, args, word", BAD_LAYOUT_ARGUMENTS)
def test_layout_rejects_bad_arguments(function, args, word):
    with pytest.raises(ValueError, match=word):
        function(*args)


@st.composite
def _samples(draw, max_samples=4, max_total=9):
    totals = draw(st.lists(st.integers(1, max_total), min_size=0, max_size=max_samples))
    responses = [draw(st.integers(0, t - 1)) for t in totals]
    return totals, responses


@settings(max_examples=60, deadline=None)
@given(samples=_samples(), qkv_format=st.sampled_from(["thd", "bshd"]), pad=st.integers(1, 6))
def test_response_rows_invert_to_their_sample_positions(samples, qkv_format, pad):
    totals, responses = samples
    rows = layout.response_rows(totals, responses, qkv_format, pad)
    n_rows = layout.stream_rows(totals, qkv_format, pad)
    assert n_rows % pad == 0 if qkv_format == "thd" else n_rows == len(totals) * layout.bshd_seq_len(totals, pad)
    for i, (sample_rows, total, response) in enumerate(zip(rows, totals, responses)):
        prompt = total - response
        assert [layout.sample_position_of_row(r, totals, qkv_format, pad) for r in sample_rows] == [
            (i, p) for p in range(prompt - 1, total - 1)
        ]
    held = [layout.sample_position_of_row(r, totals, qkv_format, pad) for r in range(n_rows)]
    assert sorted(h for h in held if h is not None) == [(i, p) for i, t in enumerate(totals) for p in range(t)]


# ---- losses ------------------------------------------------------------------------


def _f64(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_probe_loss_by_hand():
    # a.l = 0.5*1 + 1*2 + 2*3 = 8.5; b.H = 1*1 + 0*1 + 0.25*2 = 1.5
    lp, h = [_f64(1, 2), _f64(3)], [_f64(1, 1), _f64(2)]
    a, b = [_f64(0.5, 1), _f64(2)], [_f64(1, 0), _f64(0.25)]
    assert float(losses.probe_loss(lp, h, a, b)) == 10.0
    assert float(losses.probe_loss(lp, None, a, None)) == 8.5
    with pytest.raises(ValueError, match="b"):
        losses.probe_loss(lp, h, a, None)


def test_sum_of_sample_mean_by_hand():
    # [2, 7] mask [1, 0] -> 2; [5] all masked -> 0; [] empty -> 0; [1, 2, 3] all kept -> 2. Total 4.
    values = [_f64(2, 7), _f64(5), _f64(), _f64(1, 2, 3)]
    masks = [_f64(1, 0), _f64(0), _f64(), _f64(1, 1, 1)]
    assert float(losses.sum_of_sample_mean(values, masks)) == 4.0


def test_policy_loss_by_hand():
    # eps_clip 0.2, eps_clip_high 0.28 -> ratios clamp to [0.8, 1.28]; pg = max(-A r, -A clamp(r)).
    # s0: r = [1.5, 0.9, 2.0], A = [1, -1, 5], mask [1, 1, 0]
    #     t0: max(-1.5, -1.28) = -1.28 (clipped high);  t1: max(0.9, 0.9) = 0.9 (not clipped);
    #     t2 masked.  mean (-1.28 + 0.9) / 2 = -0.19
    # s1: r = [0.5], A = [-1]: max(0.5, 0.8) = 0.8 (clipped low)
    # s2: all masked -> 0;  s3: empty -> 0.    pg total = 0.61
    # entropy: s0 [1, 3, (100 masked)] -> 2; s1 [4] -> 4; s2, s3 -> 0; 0.61 - 0.5 * 6 = -2.39
    ratios = [_f64(1.5, 0.9, 2.0), _f64(0.5), _f64(1.0), _f64()]
    lp = [r.log().requires_grad_() for r in ratios]
    old = [torch.zeros_like(r) for r in ratios]
    advantages = [_f64(1, -1, 5), _f64(-1), _f64(3), _f64()]
    masks = [_f64(1, 1, 0), _f64(1), _f64(0), _f64()]
    entropy = [_f64(1, 3, 100), _f64(4), _f64(7), _f64()]
    kwargs = dict(eps_clip=0.2, eps_clip_high=0.28)
    pg_only = losses.policy_loss(lp, old, advantages, masks, None, entropy_coef=0.5, **kwargs)
    assert math.isclose(pg_only.item(), 0.61, abs_tol=1e-12)
    loss = losses.policy_loss(lp, old, advantages, masks, entropy, entropy_coef=0.5, **kwargs)
    assert math.isclose(loss.item(), -2.39, abs_tol=1e-12)
    # d/dl: clipped tokens 0; t1: d(-A r)/dl = -A r = 0.9, over 2 kept tokens -> 0.45; masked 0.
    grads = torch.autograd.grad(loss, lp[:3])
    torch.testing.assert_close(grads[0], _f64(0, 0.45, 0), rtol=0, atol=1e-12)
    assert float(grads[1].abs().sum()) == 0.0 and float(grads[2].abs().sum()) == 0.0


# ---- packed reference --------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    samples=_samples(),
    pad=st.integers(1, 5),
    vocab=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    temperature=st.sampled_from([1.0, 0.7, 1.9]),
)
def test_packed_reference_equals_token_oracle_row_by_row(samples, pad, vocab, seed, temperature):
    """Both layouts, built from the same per-sample logits, give the row-by-row token oracle."""
    totals, responses = samples
    g = torch.Generator().manual_seed(seed)
    sample_logits = [torch.randn(t, vocab, generator=g, dtype=torch.float64) * 4 for t in totals]
    tokens = [torch.randint(0, vocab, (t,), generator=g) for t in totals]
    for qkv_format in ("thd", "bshd"):
        n_rows = layout.stream_rows(totals, qkv_format, pad)
        stream = torch.randn(n_rows, vocab, generator=g, dtype=torch.float64)  # padding rows: random filler
        for row in range(n_rows):
            held = layout.sample_position_of_row(row, totals, qkv_format, pad)
            if held is not None:
                stream[row] = sample_logits[held[0]][held[1]]
        x = stream.clone().requires_grad_()
        lp, h = losses.packed_reference(x, tokens, totals, responses, qkv_format, pad, temperature)
        for i, (total, response) in enumerate(zip(totals, responses)):
            assert lp[i].shape == h[i].shape == (response,)
            for j in range(response):
                position = total - response - 1 + j
                row = sample_logits[i][position : position + 1]
                assert lp[i][j] == token.log_probs(row, tokens[i][position + 1 : position + 2], temperature)[0]
                assert h[i][j] == token.entropy(row, temperature)[0]
        weights = [torch.ones_like(v) for v in lp]
        loss = losses.probe_loss(lp, h, weights, weights)
        if loss.requires_grad:
            (grad,) = torch.autograd.grad(loss, x)
            used = {r for rows in layout.response_rows(totals, responses, qkv_format, pad) for r in rows}
            unused = [r for r in range(n_rows) if r not in used]
            assert bool((grad[unused] == 0).all())


def test_packed_reference_rejects_a_wrong_row_count():
    with pytest.raises(ValueError, match="rows"):
        tokens = [torch.zeros(3, dtype=torch.long), torch.zeros(5, dtype=torch.long)]
        losses.packed_reference(torch.zeros(7, 3), tokens, [3, 5], [1, 3], "thd", 4, 1.0)


def test_package_reexports_the_public_functions():
    assert oracles.log_probs is token.log_probs and oracles.packed_reference is losses.packed_reference
    assert oracles.response_rows is layout.response_rows and oracles.policy_loss is losses.policy_loss
