"""verl's policy loss before agg_loss took the batch's size (#4211, 2025-11): the protocol's sum of sample means.

From #4211 ppo_loss hands agg_loss the global batch size, and ``global_batch_size = 1`` makes seq-mean-token-mean
the sum of sample means (the protocol's default aggregation). Before, agg_loss took no size and averaged over the
micro-batch's samples: the adapter reads that mean times B (harness/targets/verl/engine.py ``loss``), as it reads
TRL's. Without it every default-aggregation policy check with several samples read 1/B of the oracle's loss: the
adapter's error, not verl's.
"""

from __future__ import annotations

import pytest

from harness.checks.policy import check_policy_loss
from harness.checks.token_policy import check_token_policy_loss
from harness.targets.verl import engine as verl_engine
from tests.test_verl_target import LOSSES, POLICY_CASE, _edit, _edited

CORE_ALGOS = "verl/trainer/ppo/core_algos.py"
SIZED = "def agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1, batch_num_tokens=None, global_batch_size=None):"
SIZED_DIVISOR = """    if global_batch_size is None:
        global_batch_size = seq_mask.sum()
    return verl_F.masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size"""
EVERY_SAMPLE = "    return seq_losses.mean()"  # verl before #3915 (2025-10): the mean over every sample
NON_EMPTY = "    return verl_F.masked_sum(seq_losses, seq_mask) / seq_mask.sum()"  # #3915 to #4211: non-empty ones
PASSED = 'config.global_batch_info.update(dp_size=data["dp_size"], global_batch_size=data["global_batch_size"])'


def _unsized(tmp_path, name: str, divisor: str) -> str:
    """The correct tree with agg_loss and ppo_loss as before #4211: no batch size taken, none passed."""
    spec = _edited(
        tmp_path,
        name,
        CORE_ALGOS,
        (SIZED, "def agg_loss(loss_mat, loss_mask, loss_agg_mode):"),
        (SIZED_DIVISOR, divisor),
    )
    _edit(tmp_path / name / LOSSES, (PASSED, "pass"))
    return spec


CASE = POLICY_CASE.with_(entropy_coef=-0.5, with_entropy=True)  # three samples, the second one's response empty


def test_the_sample_mean_before_the_batch_size_is_read_times_b(tmp_path):
    spec = _unsized(tmp_path, "every-sample", EVERY_SAMPLE)
    check_policy_loss(CASE, spec)
    check_token_policy_loss(CASE, spec)


def test_without_the_translation_the_loss_reads_one_bth(tmp_path, monkeypatch):
    spec = _unsized(tmp_path, "every-sample", EVERY_SAMPLE)
    monkeypatch.setattr(verl_engine, "TAKES_BATCH_SIZE", lambda up: True)  # the record before this translation
    with pytest.raises(AssertionError, match="policy loss"):
        check_policy_loss(CASE, spec)


def test_a_mean_over_the_non_empty_samples_alone_still_fails(tmp_path):
    """#3915 to #4211: the mean over the samples with a kept token, so an empty response changes every other
    sample's weight; the protocol counts every sample (docs/policy-losses.md). verl's, and still red."""
    with pytest.raises(AssertionError, match="policy loss"):
        check_policy_loss(CASE, _unsized(tmp_path, "non-empty", NON_EMPTY))
