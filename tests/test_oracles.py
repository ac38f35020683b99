"""Self-tests of the float64 oracles against independent computations (MATH.md)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oracles import layout, losses, token


def _random(rows=5, vocab=7, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g, dtype=torch.float64) * scale, torch.randint(
        0, vocab, (rows,), generator=g
    )


@pytest.mark.parametrize("temperature", [1.0, 0.6, 3.0])
def test_values_match_log_softmax(temperature):
    logits, targets = _random()
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    torch.testing.assert_close(
        token.log_probs(logits, targets, temperature),
        log_p.gather(1, targets[:, None]).squeeze(1),
        rtol=1e-12,
        atol=1e-12,
    )
    torch.testing.assert_close(
        token.entropy(logits, temperature), -(log_p.exp() * log_p).sum(-1), rtol=1e-12, atol=1e-12
    )


def test_gradients_match_finite_differences():
    logits, targets = _random(rows=3, vocab=4)
    a, b = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)

    def loss(x):
        return (a * token.log_probs(x, targets, 0.8)).sum() + (b * token.entropy(x, 0.8)).sum()

    assert torch.autograd.gradcheck(loss, (logits.clone().requires_grad_(),))


def test_gradients_match_closed_forms():
    logits, targets = _random()
    x = logits.clone().requires_grad_()
    token.log_probs(x, targets).sum().backward()
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(x.grad, torch.nn.functional.one_hot(targets, 7).double() - p)
    x.grad = None
    entropy = token.entropy(x)
    entropy.sum().backward()
    torch.testing.assert_close(x.grad, -p * (p.log() + entropy.detach()[:, None]))


def test_neg_inf_columns_contribute_nothing_and_give_finite_gradients():
    logits, targets = _random(scale=1e4)
    logits[0] -= 3e4  # lse far below 0: exp(-lse) overflows in any discarded where-branch
    masked = logits.clone()
    masked[:, [1, 4]] = -math.inf
    targets = torch.where((targets == 1) | (targets == 4), torch.zeros_like(targets), targets)
    x = masked.clone().requires_grad_()
    (token.log_probs(x, targets).sum() + token.entropy(x).sum()).backward()
    assert torch.isfinite(x.grad).all() and bool((x.grad[:, [1, 4]] == 0).all())
    kept = [0, 2, 3, 5, 6]
    remap = torch.tensor([0, 0, 1, 2, 0, 3, 4])[targets]
    torch.testing.assert_close(token.entropy(masked), token.entropy(logits[:, kept]))
    torch.testing.assert_close(token.log_probs(masked, targets), token.log_probs(logits[:, kept], remap))


def test_huge_magnitudes_stay_finite():
    logits, targets = _random(scale=1e4)
    logits = logits + 3e4
    assert torch.isfinite(token.log_probs(logits, targets)).all()
    assert torch.isfinite(token.entropy(logits)).all()


def test_layout_hand_worked_examples():
    assert layout.response_rows([3, 5], [1, 3], "thd", 4) == [[1], [4, 5, 6]]
    assert layout.stream_rows([3, 5], "thd", 4) == 8
    assert layout.response_rows([3, 5], [1, 3], "bshd", 4) == [[1], [9, 10, 11]]
    assert layout.stream_rows([3, 5], "bshd", 4) == 16
    assert layout.response_rows([4, 1], [0, 0], "thd", 1) == [[], []]
    assert layout.response_rows([2], [1], "thd", 1) == [[0]]


@pytest.mark.parametrize(
    "args, word",
    [
        (([3], [3], "thd", 1), "response_lengths"),
        (([3], [1, 1], "thd", 1), "response_lengths"),
        (([3], [1], "sbhd", 1), "qkv_format"),
        (([3], [1], "thd", 0), "pad_multiple"),
    ],
)
def test_layout_rejects_bad_arguments(args, word):
    with pytest.raises(ValueError, match=word):
        layout.response_rows(*args)


def test_sum_of_sample_mean_and_policy_loss_by_hand():
    # sample 0: mask [1, 0] -> mean of [2] = 2; sample 1: all masked -> 0; total 2
    assert (
        float(
            losses.sum_of_sample_mean(
                [torch.tensor([2.0, 7.0]), torch.tensor([5.0])], [torch.tensor([1.0, 0.0]), torch.tensor([0.0])]
            )
        )
        == 2.0
    )
    # one sample, two tokens, A = [1, -1], log ratios [log 1.5, log 0.5], eps 0.2:
    # token 0: max(-1.5, -1.2) = -1.2 (clipped); token 1: max(0.5, 0.8) = 0.8 (clipped); mean -0.2
    log_probs = [torch.log(torch.tensor([1.5, 0.5], dtype=torch.float64))]
    loss = losses.policy_loss(
        log_probs,
        [torch.zeros(2)],
        [torch.tensor([1.0, -1.0])],
        [torch.ones(2)],
        None,
        eps_clip=0.2,
        eps_clip_high=0.2,
        entropy_coef=0.0,
    )
    assert math.isclose(float(loss), -0.2, abs_tol=1e-12)
    # entropy bonus: minus coef times the masked mean entropy
    with_bonus = losses.policy_loss(
        log_probs,
        [torch.zeros(2)],
        [torch.tensor([1.0, -1.0])],
        [torch.ones(2)],
        [torch.tensor([1.0, 3.0])],
        eps_clip=0.2,
        eps_clip_high=0.2,
        entropy_coef=0.5,
    )
    assert math.isclose(float(with_bonus), -0.2 - 0.5 * 2.0, abs_tol=1e-12)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4), data=st.data())
def test_per_sample_rows_equal_row_by_row_token_oracle(lengths, data):
    responses = [data.draw(st.integers(0, t - 1)) for t in lengths]
    pad = data.draw(st.sampled_from([1, 4]))
    rows = layout.response_rows(lengths, responses, "thd", pad)
    logits, targets = _random(rows=layout.stream_rows(lengths, "thd", pad), vocab=5)
    per_row = token.log_probs(logits, targets)
    for sample_rows, picked in zip(rows, losses.per_sample(per_row, rows)):
        for row, value in zip(sample_rows, picked):
            assert value == token.log_probs(logits[row : row + 1], targets[row : row + 1])[0]
