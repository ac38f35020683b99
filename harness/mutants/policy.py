"""What consumes the log-probs (docs/policy-losses.md): one mutant per loss option, in ``impl.policy_terms``
and ``impl.policy_loss``, and the token-level loss's padding; then one per option that changes its formula
only in its far regime (``REGIME``: a clamp, a saturation, a truncation bound; harness/cases/policy.py), killed
only because the strategies draw that regime and the properties pin it (``FAR_EXAMPLES``).

The regime mutants form three bug classes (a far ratio, a KL far from the reference, a rollout weight at its
bounds); each class's representative runs in the fast suite, the others nightly (harness/mutants/mutant.py).
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant

OPTIONS = (
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

_BOTH = ("properties/test_policy_losses.py", "properties/test_token_policy_losses.py")

# Each changes one option's formula only where its inputs are far (harness/cases/policy.py, ``far``): near
# inputs (log-ratios within 0.4, the reference within 0.4, rollout log-weights within 1) never reach the change.
REGIME = (
    Mutant(
        name="ppo_log_ratio_clamped",
        bug="PPO's ratio taken from a log-ratio clamped to [-1, 1] (a 'safety clamp' far tighter than the +-20 "
        "trainers use): wherever the unclipped side of the loss is taken (A < 0 and r > e, A > 0 and r < 1/e) the "
        "value and gradient stop following the ratio",
        module="impl.policy_terms",
        original="    ratios = [torch.exp(lr) for lr in log_ratios]\n",
        replacement="    ratios = [torch.exp(lr.clamp(-1.0, 1.0)) for lr in log_ratios]\n",
        killed_by=_BOTH,
        bug_class="policy loss: far-ratio regime",
        representative=True,
    ),
    Mutant(
        name="gspo_sequence_log_ratio_clamped",
        bug="GSPO's sequence ratio taken from its mean log-ratio clamped to [-1, 1]: a sample whose policy moved "
        "far gets the loss and gradient of one that moved by e",
        module="impl.policy_terms",
        original="        means = sample_means(log_ratios, masks, counts, cp_group)\n",
        replacement="        means = [m.clamp(-1.0, 1.0) for m in sample_means(log_ratios, masks, counts, cp_group)]\n",
        killed_by=_BOTH,
        bug_class="policy loss: far-ratio regime",
    ),
    Mutant(
        name="cispo_clip_skipped_above_3",
        bug="CISPO's clipped weight not clipped where the ratio exceeds 3 (the clip applied to moderate ratios "
        "only): a token far above the band gets its full ratio as weight",
        module="impl.policy_terms",
        original="            -r.clamp(1 - eps_low, 1 + eps_high).detach() * a * _masked(lp, m)\n",
        replacement="            -torch.where(r > 3.0, r, r.clamp(1 - eps_low, 1 + eps_high)).detach()"
        " * a * _masked(lp, m)\n",
        killed_by=_BOTH,
        bug_class="policy loss: far-ratio regime",
    ),
    Mutant(
        name="dual_clip_skipped_above_3",
        bug="the dual clip's c|A| cap not applied where the ratio exceeds 3: a negative-advantage token whose "
        "policy moved far is the one the dual clip exists for",
        module="impl.policy_terms",
        original="    return torch.where(advantage < 0, torch.minimum(pg, -dual_clip_c * advantage), pg)\n",
        replacement="    return torch.where(\n"
        "        (advantage < 0) & (ratio < 3.0), torch.minimum(pg, -dual_clip_c * advantage), pg\n"
        "    )\n",
        killed_by=_BOTH,
        bug_class="policy loss: far-ratio regime",
    ),
    Mutant(
        name="k3_log_ratio_clamped",
        bug="k3's exp(-d) taken of d = logp - ref clamped to [-3, 3]: far from the reference (the regime where the "
        "estimators differ most) the penalty and its gradient stop growing",
        module="impl.policy_terms",
        original="            out.append(torch.exp(-d) + d - 1)\n",
        replacement="            out.append(torch.exp(-d.clamp(-3.0, 3.0)) + d - 1)\n",
        killed_by=_BOTH,
        bug_class="policy loss: KL far from the reference",
    ),
    Mutant(
        name="low_var_kl_unsaturated",
        bug="low_var_kl without its saturation at 10 (verl's clamp): a policy more than 2.6 nats below the "
        "reference gets k3's unbounded penalty and gradient instead of a constant",
        module="impl.policy_terms",
        original="            out.append((torch.exp(x) - x - 1).clamp(max=10))\n",
        replacement="            out.append(torch.exp(x) - x - 1)\n",
        killed_by=_BOTH,
        bug_class="policy loss: KL far from the reference",
        representative=True,
    ),
    Mutant(
        name="kl_ratio_weight_clamped",
        bug="the ratio weighting the KL term clamped at 3: far from the behaviour policy the weighted KL (and its "
        "gradient through the ratio) is under-counted",
        module="impl.policy_loss",
        original="            kl = [k * torch.exp(lp - old.to(lp))"
        " for k, lp, old in zip(kl, log_probs, old_log_probs)]\n",
        replacement="            kl = [\n"
        "                k * torch.exp(lp - old.to(lp)).clamp(max=3.0)\n"
        "                for k, lp, old in zip(kl, log_probs, old_log_probs)\n"
        "            ]\n",
        killed_by=_BOTH,
        bug_class="policy loss: KL far from the reference",
    ),
    Mutant(
        name="rollout_log_weight_clamped",
        bug="the rollout weight exp(old - rollout) taken of a log-weight clamped to [-2, 2]: without a floor, a "
        "token (or sequence) the rollout engine sampled far more often than the trainer would gets a weight of "
        "0.135 instead of its own",
        module="impl.policy_terms",
        original="        w = torch.exp(lw)\n",
        replacement="        w = torch.exp(lw.clamp(-2.0, 2.0))\n",
        killed_by=_BOTH,
        bug_class="policy loss: rollout weights at their bounds",
        representative=True,
    ),
    Mutant(
        name="rejection_keeps_far_weights",
        bug="rejection sampling that accepts a weight more than 20 times the cap (an overflow guard taken for an "
        "acceptance): the tokens most off-policy are the ones kept",
        module="impl.policy_terms",
        original="            weights.append(keep.to(w.dtype))\n",
        replacement="            weights.append((keep | (w > 20 * terms.rollout_cap)).to(w.dtype))\n",
        killed_by=_BOTH,
        bug_class="policy loss: rollout weights at their bounds",
    ),
)

POLICY = OPTIONS + REGIME
