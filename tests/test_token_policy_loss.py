"""Self-tests of the token-level policy loss's plumbing: impl's argument errors, the matrices the harness sends."""

import pytest
import torch

from harness.cases import policy, token_policy
from harness.cases.case import Case
from harness.jobs.token_policy import token_policy_options
from impl.policy_terms import LossTerms
from impl.token_policy_loss import token_policy_loss

B, R = 2, 3


def _inputs():
    return dict(
        log_probs=torch.zeros(B, R, requires_grad=True),
        old_log_probs=torch.zeros(B, R),
        advantages=torch.ones(B, R),
        loss_mask=torch.ones(B, R),
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"old_log_probs": torch.zeros(B, R + 1)}, "old_log_probs must have log_probs' shape"),
        ({"loss_mask": torch.ones(B)}, "loss_mask must have log_probs' shape"),
        ({"entropy": torch.zeros(B + 1, R)}, "entropy must have log_probs' shape"),
        ({"log_probs": torch.zeros(B * R)}, r"log_probs must be a \[B, R\] tensor"),
        ({"terms": LossTerms(kl_coef=0.1)}, "needs ref_log_probs="),
        ({"terms": LossTerms(rollout_correction="tis")}, "needs rollout_log_probs="),
        ({"terms": LossTerms(aggregation="mean")}, "aggregation='mean'"),
        ({"terms": LossTerms(kl_coef=0.1), "ref_log_probs": torch.zeros(R)}, "ref_log_probs must have"),
    ],
)
def test_bad_arguments_are_refused_by_name(change, named):
    arguments = {**_inputs(), **change}
    with pytest.raises(ValueError, match=named):
        token_policy_loss(
            arguments.pop("log_probs"),
            arguments.pop("old_log_probs"),
            arguments.pop("advantages"),
            arguments.pop("loss_mask"),
            **arguments,
        )


def test_every_response_empty_is_a_zero_loss_without_nan():
    log_probs = torch.zeros(B, 0, requires_grad=True)
    empty = torch.zeros(B, 0)
    for aggregation in ("token-mean", "seq-mean-token-mean", "sum-of-sample-mean"):
        loss = token_policy_loss(log_probs, empty, empty, empty, terms=LossTerms(aggregation=aggregation))
        assert float(loss) == 0.0


def test_the_harness_sends_left_aligned_zero_padded_rows():
    case = policy.with_options(Case(samples=((6, 4), (3, 0), (4, 2))), kl_coef=0.1)
    sent = token_policy.inputs(case)
    mask = sent.matrix(sent.loss_masks)
    assert mask.shape == (3, 4) and mask.dtype == torch.float32
    assert mask[1].sum() == 0 and mask[2, 2:].sum() == 0
    assert torch.equal(sent.matrix(sent.log_probs)[0], sent.log_probs[0].float())
    options = token_policy_options(case, sent)["options"]
    assert options.ref_log_probs.shape == (3, 4) and options.rollout_log_probs is None
    assert token_policy_options(Case(), token_policy.inputs(Case())) == {}
