"""What consumes the log-probs (docs/policy-losses.md): one mutant per loss option, in ``impl.policy_terms``
and ``impl.policy_loss``, and the token-level loss's padding.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant

POLICY = (
    Mutant(
        name="kl_term_detached",
        bug="docs/bugs.md #1's shape for the KL loss term: the KL estimator is computed from detached log-probs, so "
        "the penalty is reported but never pulls the policy toward the reference",
        module="impl.policy_terms",
        original="        d = _masked(lp - ref.to(lp), m)\n",
        replacement="        d = _masked(lp.detach() - ref.to(lp), m)\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: option formula",
    ),
    Mutant(
        name="dual_clip_on_positive_advantages",
        bug="dual-clip PPO with the advantage's sign flipped: the c|A| cap is applied where A > 0 (capping every "
        "positive-advantage token) instead of where A < 0",
        module="impl.policy_terms",
        original="    return torch.where(advantage < 0, torch.minimum(pg, -dual_clip_c * advantage), pg)\n",
        replacement="    return torch.where(advantage > 0, torch.minimum(pg, -dual_clip_c * advantage), pg)\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: option formula",
        representative=True,
    ),
    Mutant(
        name="aggregation_normaliser_per_cp_rank",
        bug="the loss aggregation's normaliser (token count, samples) taken from this CP rank's part of the batch "
        "instead of the whole batch, so the loss changes with the context-parallel layout",
        module="impl.policy_loss",
        original="        return aggregate(values, masks, counts, terms.aggregation, full_masks, terms.horizon)\n",
        replacement="        return aggregate(values, masks, counts, terms.aggregation, masks, terms.horizon)\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: CP aggregation",
        representative=True,
    ),
    Mutant(
        name="gspo_ratio_per_token",
        bug="GSPO computed with the per-token ratio exp(logp_t - old_t) instead of the sequence ratio "
        "exp(mean_t(logp_t - old_t)): plain PPO under GSPO's name",
        module="impl.policy_terms",
        original="        means = sample_means(log_ratios, masks, counts, cp_group)\n",
        replacement="        means = [lr.detach() for lr in log_ratios]\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: option formula",
    ),
    Mutant(
        name="sequence_statistic_per_cp_rank",
        bug="a sequence-level statistic (GSPO's mean log-ratio, the sequence/geometric rollout weight) taken over "
        "this CP rank's part of each sample: no sum over the CP group",
        module="impl.policy_terms",
        original="    return sum_in_rank_order(local, cp_group)\n",
        replacement="    return local\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: CP aggregation",
    ),
    Mutant(
        name="cispo_weight_not_detached",
        bug="CISPO's clipped importance weight keeps its gradient: the loss becomes -clip(r) A logp differentiated "
        "through r as well, doubling the unclipped tokens' gradient",
        module="impl.policy_terms",
        original="            -r.clamp(1 - eps_low, 1 + eps_high).detach() * a * _masked(lp, m)\n",
        replacement="            -r.clamp(1 - eps_low, 1 + eps_high) * a * _masked(lp, m)\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: option formula",
    ),
    Mutant(
        name="tis_truncated_from_below",
        bug="truncated importance sampling on the wrong side: the rollout weight is clamped from below at the cap "
        "(every weight at least C) instead of from above",
        module="impl.policy_terms",
        original="            weights.append(w.clamp(terms.rollout_floor, terms.rollout_cap))\n",
        replacement="            weights.append(w.clamp(min=terms.rollout_cap))\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: option formula",
    ),
    Mutant(
        name="mis_truncates_instead_of_masking",
        bug="masked importance sampling that truncates: a weight outside [floor, cap] is clamped (TIS) instead of "
        "zeroed, so the mismatched tokens still drive the update",
        module="impl.policy_terms",
        original="            weights.append(torch.where(keep, w, 0.0))\n",
        replacement="            weights.append(\n"
        "                torch.where(keep, w, w.clamp(terms.rollout_floor, terms.rollout_cap))\n"
        "            )\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: option formula",
    ),
    Mutant(
        name="rejection_keeps_the_weight",
        bug="rejection sampling that reweights: a kept token gets its importance weight w instead of 1, so the "
        "'reject only' correction also rescales every accepted token",
        module="impl.policy_terms",
        original="            weights.append(keep.to(w.dtype))\n",
        replacement="            weights.append(torch.where(keep, w, 0.0))\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: option formula",
    ),
    Mutant(
        name="entropy_term_ignores_aggregation",
        bug="the entropy bonus aggregated with a fixed per-sample mean whatever the loss's aggregation mode, so its "
        "weight against the policy term changes with batch composition",
        module="impl.policy_loss",
        original="        loss = loss - entropy_coef * agg(entropy)\n",
        replacement="        loss = loss - entropy_coef * aggregate(\n"
        '            entropy, masks, counts, "sum-of-sample-mean", [], None\n'
        "        )\n",
        killed_by=("properties/test_policy_losses.py",),
        bug_class="policy loss: option formula",
    ),
    Mutant(
        name="token_loss_counts_padding",
        bug="the token-level policy loss (impl.token_policy_loss, [B, R] matrices) takes its normalisers from the "
        "matrix's width instead of the loss mask: every padded position counts as a token, so a sample's mean and "
        "the batch's token count change with the longest response in the batch",
        module="impl.token_policy_loss",
        original="        full_masks=masks,\n",
        replacement="        full_masks=[torch.ones_like(m) for m in masks],\n",
        killed_by=("properties/test_token_policy_losses.py",),
        bug_class="policy loss: token-level normalisers",
        representative=True,
    ),
)
