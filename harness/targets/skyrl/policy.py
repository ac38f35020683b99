"""SkyRL's PPO policy loss presented as the harness's ``policy_loss`` (used by ``skyrl.SkyRLTarget``).

What runs is SkyRL's own code, loaded from the same root as its model utilities:

* ``skyrl/backends/skyrl_train/utils/ppo_utils.py``: the clipped PG loss is
  ``PolicyLossRegistry.get("regular")`` (``ppo_policy_loss``, what SkyRL's
  trainer resolves for ``policy_loss_type="regular"``) and the loss reduction
  is ``apply_loss_reduction_to_advantages_minibatch`` (SkyRL reduces a policy
  loss by PRE-SCALING the advantages and then summing ``loss * loss_mask``).
  Its import-time dependencies (Ray, loguru, jaxtyping, omegaconf, numpy, the
  trainer config) are stand-ins (``harness.targets.skyrl.stand_ins``); its sibling utility
  modules (``torch_utils``, ``off_policy_correction_utils``) are SkyRL's own,
  executed under namespace packages (``checkout.py``: no ``__init__`` runs).
* the entropy gate and whether the entropy term enters the loss come from the
  Megatron model wrapper (``workers/megatron/megatron_model_wrapper.py``),
  whose ``loss_func`` needs a Megatron model and cannot run here. Its source is
  parsed (``ast``, never executed as a whole) for the two expressions that
  decide them: the argument of the ``torch.set_grad_enabled(...)`` around its
  entropy computation, and the condition of the ``if`` that builds
  ``entropy_loss_term``. Both are evaluated with ``loss_config`` bound to the
  adapter's settings, so the gate the harness checks (docs/bugs.md #1) is the one
  written in SkyRL's file. In 0.3.0 both are ``loss_config.use_entropy_loss``.

Mapping onto the harness's policy loss (docs/math.md):

* settings: ``policy_loss_type="regular"``, ``eps_clip_low`` / ``eps_clip_high``
  = the harness's ``eps_clip`` / ``eps_clip_high``, no KL loss, no rollout
  log-probs (so no off-policy correction), ``use_entropy_loss = with_entropy
  and entropy_coef != 0`` with ``entropy_loss_coef = entropy_coef`` (SkyRL
  keeps the flag and the coefficient apart; a SkyRL run asks for an entropy
  bonus of ``c`` with the flag on and ``c``, and for none with the flag off,
  its default);
* reduction: the harness's ``sum_of_sample_mean`` (per-sample masked mean,
  summed) is not one of SkyRL's reductions. Its ``sequence_mean`` is the MEAN
  over the batch of the per-sample masked means (advantages divided by
  ``B * max(mask count, 1)``); the PPO objective is positively homogeneous in
  the advantage, so ``B * sequence_mean`` equals ``sum_of_sample_mean``
  exactly (up to rounding). The adapter runs SkyRL's ``sequence_mean`` and
  multiplies the loss by ``B``;
* the entropy term: SkyRL's wrapper uses a batch-wide TOKEN mean of the
  entropy (``vocab_parallel_entropy_packed_sequences`` / ``masked_mean``),
  which is not the harness's per-sample mean and is not equal to it. The
  adapter therefore builds ``entropy_loss_coef * sum_of_sample_mean(H)`` itself
  from SkyRL's per-token entropy (``vocab_parallel_entropy``), summed in fp32
  (the term is the adapter's arithmetic, so its rounding must not be charged
  to SkyRL); only the gate
  and the term's condition are SkyRL's;
* tensors are SkyRL's ``[B, R_max]`` action layout: row ``i`` holds sample
  ``i``'s response log-probs (from SkyRL's packed output, positions
  ``[P_i − 1, T_i − 1)``), zero-padded with loss mask 0;
* context parallelism: SkyRL gathers every sequence's log-probs onto every CP
  rank and computes the whole batch's loss on each, leaving the CP scaling to
  Megatron's schedule. The harness wants each CP rank's SHARE, its losses
  adding up to the batch's, and hands each rank only its zigzag view of the
  advantages and old log-probs. So the reduction's pre-scaling uses the full
  loss masks, and the mask passed to ``ppo_policy_loss`` keeps only this
  rank's view positions: the shares sum to the batch's loss, and each rank's
  gradient is its own tokens' (what SkyRL's gather backward keeps).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import torch

from harness.targets.skyrl import options as skyrl_options
from harness.targets.skyrl import stand_ins
from harness.targets.upstream import checkout, packing

PPO_UTILS = Path("skyrl/backends/skyrl_train/utils/ppo_utils.py")
WRAPPER = Path("skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py")
PPO_MODULE = "skyrl.backends.skyrl_train.utils.ppo_utils"
PACKAGES = ("skyrl", "skyrl.backends", "skyrl.backends.skyrl_train", "skyrl.backends.skyrl_train.utils")


class WrapperGate:
    """The two decisions SkyRL's Megatron ``loss_func`` makes about entropy, read from its source."""

    def __init__(self, grad_enabled: ast.expr, term_added: ast.expr):
        self._grad = compile(ast.Expression(grad_enabled), str(WRAPPER), "eval")
        self._term = compile(ast.Expression(term_added), str(WRAPPER), "eval")
        self.text = f"set_grad_enabled({ast.unparse(grad_enabled)}); term if {ast.unparse(term_added)}"

    def _evaluate(self, code, settings) -> bool:
        # Safe by construction: read_wrapper_gate admits only attribute/boolean expressions over loss_config.
        return bool(eval(code, {"__builtins__": {}}, {"loss_config": settings}))

    def grad_enabled(self, settings) -> bool:
        return self._evaluate(self._grad, settings)

    def term_added(self, settings) -> bool:
        return self._evaluate(self._term, settings)


def _only_loss_config(expr: ast.expr) -> bool:
    """An expression the adapter can evaluate: it names nothing but ``loss_config`` (attributes, not, and/or)."""
    names = {node.id for node in ast.walk(expr) if isinstance(node, ast.Name)}
    calls = [node for node in ast.walk(expr) if isinstance(node, ast.Call)]
    return names == {"loss_config"} and not calls


def read_wrapper_gate(root: Path) -> WrapperGate | None:
    """The gate and term condition of the wrapper's ``loss_func``; None where the file has no such pattern."""
    path = root / WRAPPER
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text())
    loss_funcs = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "loss_func"]
    grad, term = None, None
    for func in loss_funcs:
        for node in ast.walk(func):
            if isinstance(node, ast.With) and grad is None:
                call = node.items[0].context_expr
                named = isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "set_grad_enabled"
                computes_entropy = any(
                    isinstance(n, ast.Name) and n.id.startswith("entropy") for s in node.body for n in ast.walk(s)
                )
                if named and computes_entropy and len(call.args) == 1:
                    grad = call.args[0]
            if isinstance(node, ast.If) and term is None:
                assigned = {
                    t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)
                }
                if "entropy_loss_term" in assigned:
                    term = node.test
    if grad is None or term is None or not (_only_loss_config(grad) and _only_loss_config(term)):
        return None
    return WrapperGate(grad, term)


def load_ppo_utils(root: Path):
    """SkyRL's ppo_utils (and its sibling utilities) from ``root``, with stand-ins for its import-time deps."""
    if not (root / PPO_UTILS).is_file():
        return None
    modules = checkout.namespace_packages(root, PACKAGES)
    with stand_ins.loading(modules), checkout.as_sys_modules(modules, "skyrl"):
        spec = importlib.util.spec_from_file_location(PPO_MODULE, root / PPO_UTILS)
        module = importlib.util.module_from_spec(spec)
        sys.modules[PPO_MODULE] = module
        spec.loader.exec_module(module)
    for name in ("PolicyLossRegistry", "apply_loss_reduction_to_advantages_minibatch"):
        if not hasattr(module, name):
            return None
    return module


def algorithm_settings(*, eps_clip, eps_clip_high, entropy_coef, with_entropy, options=None):
    """SkyRL's ``cfg.algorithm``: plain PPO with the harness's clip range and entropy bonus, or ``options``."""
    return skyrl_options.algorithm_settings(
        options, eps_clip=eps_clip, eps_clip_high=eps_clip_high, entropy_coef=entropy_coef, with_entropy=with_entropy
    )


def _response_indices(inputs, cp: int, cp_rank: int) -> list[list[int]]:
    """Per sample, the response index (0..R_i−1) of each position of this rank's zigzag view."""
    return [
        [p - (total - response - 1) for p in positions]
        for total, response, positions in zip(
            inputs.total_lengths, inputs.response_lengths, packing.view_positions(inputs, cp, cp_rank)
        )
    ]


def _scatter(values, indices, shape, like) -> torch.Tensor:
    """``[B, R_max]`` zeros with each sample's view values at their response indices (differentiable)."""
    out = torch.zeros(shape, dtype=like.dtype, device=like.device)
    for i, (value, index) in enumerate(zip(values, indices)):
        if index:
            rows = torch.full((len(index),), i, device=out.device)
            out = out.index_put((rows, torch.tensor(index, device=out.device)), value.to(out.device, out.dtype))
    return out


def _whole_batch(values, indices, shape, like, cp_group) -> torch.Tensor:
    """``[B, R_max]`` of per-sample view values summed over the CP group: every rank's part (views are disjoint)."""
    full = _scatter([v.detach() for v in values], indices, shape, like)
    if cp_group is not None and torch.distributed.is_initialized() and torch.distributed.get_world_size(cp_group) > 1:
        torch.distributed.all_reduce(full, group=cp_group)
    return full


def aggregate_views(values, indices, masks, aggregation, horizon, like) -> torch.Tensor:
    """The harness's aggregation of per-sample view values (the adapter's arithmetic, in fp32; this rank's share)."""
    total = torch.zeros((), device=like.device)
    counts = [m.float().sum().clamp(min=1.0).to(like.device) for m in masks]
    for value, index, mask, count in zip(values, indices, masks, counts):
        term = (value.float() * mask.float().to(value.device)[index]).sum()
        total = total + (term / count if aggregation in ("sum-of-sample-mean", "seq-mean-token-mean") else term)
    if aggregation == "token-mean":
        return total / max(float(sum(m.float().sum() for m in masks)), 1.0)
    if aggregation in ("seq-mean-token-mean", "seq-mean-token-sum"):
        return total / max(len(masks), 1)
    if aggregation == "seq-mean-token-sum-norm":
        return total / (max(len(masks), 1) * horizon)
    return total


def policy_loss(
    ppo_utils,
    gate: WrapperGate,
    unpacked,
    entropy_rows,
    inputs,
    *,
    advantages,
    old_log_probs,
    settings,
    cp,
    cp_rank,
    options=None,
    cp_group=None,
):
    """The loss from SkyRL's packed output ``unpacked`` ``[B, U − 1]`` and per-row entropy (see the docstring).

    Returns ``(loss, per-sample entropy views or None)``; ``entropy_rows`` is the per-row entropy of this rank's
    stream computed under the wrapper's gate, or None. ``options`` (``PolicyOptions``): the loss type,
    reduction, rollout correction and KL term of ``settings`` (``harness.targets.skyrl.options``); a
    sequence-level statistic under CP reads every rank's old/rollout log-probs (summed over ``cp_group``)
    and the full loss mask, this rank's share coming from its advantages alone (zero elsewhere).
    """
    batch = len(inputs.total_lengths)
    longest = max(inputs.response_lengths, default=0)
    shape = (batch, longest)
    device = unpacked.device
    aggregation = "sum-of-sample-mean" if options is None else options.aggregation
    action_log_probs = torch.zeros(shape, dtype=unpacked.dtype, device=device)
    full_mask = torch.zeros(shape, dtype=torch.float32, device=device)
    for i, (total, response) in enumerate(zip(inputs.total_lengths, inputs.response_lengths)):
        if response:
            action_log_probs = action_log_probs.index_put(
                (torch.full((response,), i, device=device), torch.arange(response, device=device)),
                unpacked[i, total - response - 1 : total - 1],
            )
            full_mask[i, :response] = inputs.loss_masks[i].float().to(device)
    indices = _response_indices(inputs, cp, cp_rank)
    mine = _scatter([torch.ones(len(index), device=device) for index in indices], indices, shape, full_mask)
    whole = skyrl_options.needs_whole_samples(options) and cp > 1
    like = action_log_probs.detach()
    if whole:
        old = _whole_batch(old_log_probs, indices, shape, like, cp_group)
        loss_mask = full_mask
    else:
        old = _scatter(old_log_probs, indices, shape, like)
        loss_mask = full_mask * mine
    rollout = None
    if options is not None and options.rollout_log_probs is not None:
        place = _whole_batch if whole else _scatter_detached
        rollout = place(options.rollout_log_probs, indices, shape, like, cp_group)
    raw_advantages = _scatter(advantages, indices, shape, full_mask)
    scaled = ppo_utils.apply_loss_reduction_to_advantages_minibatch(
        raw_advantages,
        full_mask,
        settings.loss_reduction,
        micro_batch_size=batch,
        max_seq_len=int(options.horizon) if aggregation == "seq-mean-token-sum-norm" else longest,
    )
    loss_fn = ppo_utils.PolicyLossRegistry.get(settings.policy_loss_type)
    with stand_ins.absent_packages(stand_ins.CALL_TIME):
        pg_loss, _metrics = loss_fn(
            action_log_probs, old, scaled, config=settings, loss_mask=loss_mask, rollout_logprobs=rollout
        )
    loss = pg_loss * batch if aggregation == "sum-of-sample-mean" else pg_loss
    if settings.use_kl_loss:
        ref = _scatter([r.detach() for r in options.ref_log_probs], indices, shape, like)
        kl = ppo_utils.compute_approx_kl(
            action_log_probs, ref, loss_mask=full_mask * mine, kl_estimator_type=settings.kl_estimator_type
        )
        kl_views = [kl[i, index] for i, index in enumerate(indices)]
        term = aggregate_views(kl_views, indices, inputs.loss_masks, aggregation, options.horizon, like)
        loss = loss + settings.kl_loss_coef * term
    entropy = None
    if entropy_rows is not None:
        entropy = packing.per_sample_rows(entropy_rows, inputs, cp, cp_rank)
        if gate.term_added(settings):
            horizon = None if options is None else options.horizon
            term = aggregate_views(entropy, indices, inputs.loss_masks, aggregation, horizon, like)
            loss = loss - settings.entropy_loss_coef * term
    return loss, entropy


def _scatter_detached(values, indices, shape, like, cp_group=None) -> torch.Tensor:
    """This rank's view values in ``[B, R_max]`` (``_whole_batch``'s signature, no CP sum)."""
    return _scatter([v.detach() for v in values], indices, shape, like)


def grad_context(gate: WrapperGate, settings):
    """``torch.set_grad_enabled`` with the wrapper's own argument, as its ``loss_func`` wraps the entropy."""
    return torch.set_grad_enabled(gate.grad_enabled(settings))
