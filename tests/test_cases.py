"""Self-tests of the Case: deterministic, JSON round-trip, shards tile the global logits."""

import pytest
import torch

from harness.cases.case import Case


def test_json_round_trip_rebuilds_identical_tensors():
    case = Case(
        seed=5,
        vocab=12,
        tp=2,
        samples=((6, 3), (2, 1)),
        special=("ties", "neg_inf_columns"),
        mask_mode="mixed",
        dtype="bfloat16",
    )
    again = Case.from_json(case.to_json())
    assert again == case
    assert torch.equal(again.global_logits(), case.global_logits())
    assert all(torch.equal(a, b) for a, b in zip(again.tokens(), case.tokens()))
    assert all(torch.equal(a, b) for a, b in zip(again.loss_masks(), case.loss_masks()))


def test_rank_shards_tile_the_global_logits():
    case = Case(seed=1, vocab=12, tp=4, samples=((5, 2),))
    shards = [case.rank_logits(k) for k in range(4)]
    assert all(s.shape == (case.rows, 3) and s.is_contiguous() for s in shards)
    assert torch.equal(torch.cat(shards, dim=1), case.global_logits())


def test_targets_never_hit_masked_columns():
    case = Case(seed=2, vocab=16, samples=((30, 20),) * 3, special=("neg_inf_columns",))
    masked = set(case.neg_inf_columns())
    assert masked and len(masked) < case.vocab
    ids = set(torch.cat(case.tokens()).tolist()) | set(case.row_targets().tolist())
    assert not ids & masked


def test_probe_weights_are_zero_where_masked_and_non_uniform():
    case = Case(seed=3, vocab=8, samples=((12, 10),), mask_mode="mixed")
    (a,), (b,) = case.probe_weights()
    (mask,) = case.loss_masks()
    assert bool((a[mask == 0] == 0).all()) and bool((b[mask == 0] == 0).all())
    assert a[mask == 1].unique().numel() == int(mask.sum())


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(vocab=10, tp=4), "divisible by tp"),
        (dict(samples=((3, 3),)), "response <= total - 1"),
        (dict(dtype="float64"), "dtype"),
        (dict(special=("nan",)), "unknown special"),
    ],
)
def test_invalid_cases_are_rejected(bad, message):
    with pytest.raises(ValueError, match=message):
        Case(**bad)
