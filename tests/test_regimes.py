"""Every regime an option has is drawn: the pinned far examples reach it, the near ones never do.

A property that only ever draws ratios near 1 cannot see a defect in the
clip's far side; the regime mutants (harness/mutants/policy.py ``REGIME``,
harness/mutants/sampling.py) prove a regime is reached by being killed. This
is the cheap half of that proof, without running a check: each pinned far
example (``FAR_EXAMPLES`` of both policy-loss property files) puts its
quantity where the option's clamp, saturation or truncation bound bites,
the near examples (``OPTION_EXAMPLES``) never do, and the pinned min-p
examples keep another set under their temperature than on the raw logits.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import properties.test_policy_losses as packed
import properties.test_sampling as sampling_properties
import properties.test_token_policy_losses as token_level
from harness.cases import policy
from harness.cases.policy_strategies import policy_cases
from harness.cases.sampling import spec as sampling_spec
from harness.checks.expected import policy_reference
from oracles import sampling as sampling_oracle


def _masked(values: list, case) -> torch.Tensor:
    picked = [v[m > 0] for v, m in zip(values, case.loss_masks(), strict=True)]
    return torch.cat(picked + [torch.zeros(0, dtype=torch.float64)])


def log_ratios(case) -> torch.Tensor:
    lp = policy_reference(case).log_probs
    return _masked([a - b for a, b in zip(lp, policy.old_log_probs(case), strict=True)], case)


def reference_offsets(case) -> torch.Tensor:
    lp = policy_reference(case).log_probs
    return _masked([a - b for a, b in zip(lp, policy.ref_log_probs(case), strict=True)], case)


def rollout_log_weights(case) -> torch.Tensor:
    old = policy.as_sent(policy.old_log_probs(case))
    return _masked([a - b for a, b in zip(old, policy.rollout_log_probs(case), strict=True)], case)


def _largest(values: torch.Tensor) -> float:
    return float(values.abs().max()) if values.numel() else 0.0


def reached(case) -> set[str]:
    """The far regimes ``case``'s inputs reach: a clip-band ratio beyond e, the reference far enough that
    low_var_kl saturates, a rollout log-weight beyond 2."""
    found = set()
    if _largest(log_ratios(case)) > 1.0:
        found.add("ratio")
    opts = policy.loss_options(case)
    offsets = reference_offsets(case) if opts.kl_coef else torch.zeros(0)
    if offsets.numel() and float(offsets.min()) < -policy.LOW_VAR_KL_KINK:
        found.add("reference")
    if opts.rollout_correction and _largest(rollout_log_weights(case)) > 2.0:
        found.add("rollout")
    return found


@pytest.mark.parametrize("examples", [packed.FAR_EXAMPLES, token_level.FAR_EXAMPLES], ids=["packed", "token"])
def test_each_far_example_reaches_its_regime(examples):
    for case in examples:
        assert set(case.extra["regime"]) <= reached(case), (case.extra, reached(case))


@pytest.mark.parametrize("examples", [packed.OPTION_EXAMPLES, token_level.OPTION_EXAMPLES], ids=["packed", "token"])
def test_near_examples_stay_near(examples):
    for case in examples:
        assert not reached(case), (case.extra, reached(case))


def test_far_regimes_are_drawn_at_all():
    """The strategies draw every quantity far as well as near."""
    drawn = set()

    @settings(max_examples=80, derandomize=True, database=None, deadline=None)
    @given(case=policy_cases(tp=st.just(1), cp_sizes=(1,)))
    def collect(case):
        drawn.update(case.extra.get("regime", {}))

    collect()
    assert drawn == {"ratio", "reference", "rollout"}


def test_min_p_examples_keep_another_set_under_their_temperature():
    for case in sampling_properties.MIN_P_UNDER_TEMPERATURE:
        assert case.temperature != 1.0
        given_spec, logits = sampling_spec(case), case.global_logits()
        tempered = sampling_oracle.derive_kept(logits, case.temperature, None, None, given_spec["min_p"])
        raw = sampling_oracle.derive_kept(logits, 1.0, None, None, given_spec["min_p"])
        assert not torch.equal(tempered, raw)
        assert math.isfinite(case.temperature)
