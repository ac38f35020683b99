"""The token-level policy loss job: a target's loss over ``[B, R]`` matrices, its backward, its gradients.

In-process (the Cases are single-rank: the token-level loss has no logits to
shard), through ``harness.ranks.run.run_job`` like every job, so the Case is
recorded and its warnings reach the verdict. The target gets fresh copies of
the log-prob and entropy leaves (``harness.jobs.inputs``); whether it wrote
into any input is reported for the inputs-unmutated check alone.
"""

from __future__ import annotations

import torch

from harness.cases import policy, token_policy
from harness.cases.case import Case
from harness.jobs.inputs import Handed, reports_writes
from harness.jobs.logits import on_host
from harness.ranks.device import to_device
from harness.targets import load_target
from harness.targets.protocol import PolicyOptions


def token_policy_options(case: Case, sent: token_policy.TokenPolicyInputs) -> dict:
    """``{"options": PolicyOptions}`` with ``[B, R]`` reference/rollout log-probs, or ``{}`` for the defaults."""
    values = policy.option_values(case)
    if PolicyOptions(**values) == PolicyOptions():
        return {}

    def sent_matrix(values):
        return None if values is None else to_device(sent.matrix(values))

    return {
        "options": PolicyOptions(
            **values,
            ref_log_probs=sent_matrix(sent.ref_log_probs),
            rollout_log_probs=sent_matrix(sent.rollout_log_probs),
        )
    }


def _grad_or_zeros(leaf: torch.Tensor | None) -> torch.Tensor | None:
    if leaf is None:
        return None
    return leaf.grad.detach().cpu().clone() if leaf.grad is not None else torch.zeros(leaf.shape)


@on_host
@reports_writes
def token_policy_job(payload: dict, ctx) -> dict:
    """The loss, and its gradients w.r.t. the log-probs and the entropy (always leaves requiring grad).

    The entropy requires grad whatever its coefficient, so a bonus term that
    moves the gradient at coefficient 0, or not at all at a non-zero one, is
    seen; the other inputs are compared with their copies afterwards.
    """
    case = Case.from_json(payload["case"])
    sent = token_policy.inputs(case)
    log_probs = to_device(sent.matrix(sent.log_probs)).requires_grad_()
    entropy = None if sent.entropy is None else to_device(sent.matrix(sent.entropy)).requires_grad_()
    handed = Handed()
    fixed = {
        name: handed.watch(name, to_device(sent.matrix(values)))
        for name, values in (
            ("old_log_probs", sent.old_log_probs),
            ("advantages", sent.advantages),
            ("loss_mask", sent.loss_masks),
        )
    }
    loss = load_target(payload["spec"]).token_policy_loss(
        handed.copy("log_probs", log_probs),
        **fixed,
        eps_clip=policy.EPS_CLIP,
        eps_clip_high=policy.EPS_CLIP_HIGH,
        entropy=None if entropy is None else handed.copy("entropy", entropy),
        entropy_coef=case.entropy_coef,
        **token_policy_options(case, sent),
    )
    if loss.requires_grad:
        loss.backward()
    return {
        "loss": loss.detach().clone(),
        "grad_log_probs": _grad_or_zeros(log_probs),
        "grad_entropy": _grad_or_zeros(entropy),
        **handed.report(),
    }
