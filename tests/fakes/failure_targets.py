"""impl/ with one injected failure of each class, for the failure-timing table (bench/failure_timing.py).

Each adapter wraps ``ImplTarget.policy_loss`` and breaks it in one way, on
distributed examples only where the class is about ranks. Loaded as
``tests/fakes/failure_targets.py:<Class>``. When ``LPH_FAILURE_STAMP``
names a file, the first injected failure writes the time it happened there,
so the timing script measures from the first failing example to the report.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn

from harness.targets.impl_target import ImplTarget


def _stamp() -> None:
    path = os.environ.get("LPH_FAILURE_STAMP")
    if path and not os.path.exists(path):
        with open(path, "w") as handle:
            handle.write(repr(time.time()))


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _Injected(ImplTarget):
    def policy_loss(self, logits, inputs, **kwargs):
        return self.inject(logits, kwargs, *super().policy_loss(logits, inputs, **kwargs))

    def inject(self, logits, kwargs, loss, log_probs, entropy):
        raise NotImplementedError


class WrongValue(_Injected):
    """The loss is off by 1e-3 (its gradient is right)."""

    name = "impl-wrong-value"

    def inject(self, logits, kwargs, loss, log_probs, entropy):
        _stamp()
        return loss + 1e-3, log_probs, entropy


class WrongValueOnOneRank(WrongValue):
    """The loss is off by 1e-3 on single-rank examples only.

    Its counterexample is single-rank whichever failing example the run
    reports: a base that pairs with a PR hanging on distributed examples, so
    the PR returns on the base's counterexample (on a loaded machine a plain
    WrongValue once reported a tp-2 example, where the PR hung).
    """

    name = "impl-wrong-value-one-rank"

    def inject(self, logits, kwargs, loss, log_probs, entropy):
        if _distributed():
            return loss, log_probs, entropy
        return super().inject(logits, kwargs, loss, log_probs, entropy)


class WrongGradient(_Injected):
    """The loss value is right; its gradient gets an extra 1e-3 on every logit."""

    name = "impl-wrong-gradient"

    def inject(self, logits, kwargs, loss, log_probs, entropy):
        _stamp()
        extra = logits.float().sum() * 1e-3
        return loss + (extra - extra.detach()), log_probs, entropy


class RaiseOnRank1(_Injected):
    """Rank 1 raises before returning; its peers go on into backward collectives (or finish)."""

    name = "impl-raise-on-rank1"

    def inject(self, logits, kwargs, loss, log_probs, entropy):
        if _rank() == 1:
            _stamp()
            raise RuntimeError("injected failure on rank 1")
        return loss, log_probs, entropy


class KillRank1(_Injected):
    """Rank 1's process dies."""

    name = "impl-kill-rank1"

    def inject(self, logits, kwargs, loss, log_probs, entropy):
        if _rank() == 1:
            _stamp()
            os._exit(3)
        return loss, log_probs, entropy


class HangForward(_Injected):
    """Rank 0 alone issues an extra all-reduce in forward: it waits for peers that never join."""

    name = "impl-hang-forward"

    def inject(self, logits, kwargs, loss, log_probs, entropy):
        if _distributed() and _rank() == 0:
            _stamp()
            dist.all_reduce(torch.ones(1, device=logits.device))
        return loss, log_probs, entropy


class HangBackward(_Injected):
    """Every rank all-reduces in forward, but only rank 0's input carries a graph: only rank 0 all-reduces in backward.

    The mechanism of docs/bugs.md #5 (a differentiable collective on some ranks only).
    """

    name = "impl-hang-backward"

    def inject(self, logits, kwargs, loss, log_probs, entropy):
        if not (_distributed() and loss.requires_grad):
            return loss, log_probs, entropy
        if _rank() == 0:
            _stamp()
        contribution = loss.reshape(1) * 0 if _rank() == 0 else loss.detach().reshape(1) * 0
        reduced = dist_nn.all_reduce(contribution, group=None).sum()
        return loss + reduced, log_probs, entropy


class EntropyGradDropped(ImplTarget):
    """Right values, but the entropy's backward drops the entropy term: its graph carries a zero gradient.

    The stand-in for diagnosis by ablation (harness/checks/diagnosis.py): a
    failure here needs the entropy gradient and nothing else.
    """

    name = "impl-entropy-grad-dropped"

    @staticmethod
    def _drop(entropy, log_probs):
        # Keeps requires_grad (so gate checks see a graph) while contributing no gradient.
        return entropy.detach() + (log_probs - log_probs.detach()) * 0

    def token_log_probs(self, logits, targets, **kwargs):
        log_probs, entropy = super().token_log_probs(logits, targets, **kwargs)
        if entropy is None or not entropy.requires_grad:
            return log_probs, entropy
        return log_probs, self._drop(entropy, log_probs)

    def packed_log_probs(self, logits, inputs, **kwargs):
        log_probs, entropy = super().packed_log_probs(logits, inputs, **kwargs)
        if entropy is None:
            return log_probs, entropy
        return log_probs, [self._drop(h, lp) if h.requires_grad else h for h, lp in zip(entropy, log_probs)]


class HiddenNoTPAllReduce(ImplTarget):
    """The hidden path's LM-head input enters the TP region through c10d ``broadcast`` instead of a copy
    whose backward all-reduces: each rank's grad(hidden) is its own shard's ``g @ W_local`` only.

    Values are right at every tp and gradients right at tp=1; torch warns
    (``c10d::broadcast_: an autograd kernel was not registered``) on every
    rank. The stand-in for diagnosis ("needs: tp >= 2") and for warnings as
    evidence.
    """

    name = "impl-hidden-no-tp-all-reduce"

    def hidden_log_probs(self, hidden, weight, targets, *, tp_group, **kwargs):
        if tp_group is not None and dist.get_world_size(tp_group) > 1:
            hidden = hidden.clone()
            dist.broadcast(hidden, src=dist.get_global_rank(tp_group, 0), group=tp_group)
        return self.token_log_probs(hidden @ weight.T, targets, tp_group=tp_group, **kwargs)


class InPlaceOnLogits(ImplTarget):
    """Shifts each row of the caller's logits by its max IN PLACE before the loss (values stay right:
    log-softmax ignores a per-row shift). On a leaf torch refuses the write with its own error first."""

    name = "impl-in-place-on-logits"

    def policy_loss(self, logits, inputs, **kwargs):
        logits[:].sub_(logits.detach().amax(dim=-1, keepdim=True))
        return super().policy_loss(logits, inputs, **kwargs)


class Bf16Arithmetic(ImplTarget):
    """Token log-probs computed in the logits' dtype as ``z - logsumexp(z)`` (not log_softmax's order).

    Correct up to rounding in bf16: its error is the working dtype's, but can
    exceed twice the naive path's when that one happens to round well (the
    false contract red of a few-class bf16 case). TP=1 only.
    """

    name = "impl-bf16-arithmetic"
    capabilities = frozenset({"token", "temperature"})

    def token_log_probs(self, logits, targets, *, temperature, with_entropy, **kwargs):
        z = logits / temperature
        log_p = z - torch.logsumexp(z, dim=-1, keepdim=True)
        return log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1).float(), None


class NeighbourToken(ImplTarget):
    """A forward defect: each row's log-prob is read at the next vocabulary entry (the target index off by one)."""

    name = "impl-neighbour-token"

    def token_log_probs(self, logits, targets, **kwargs):
        return super().token_log_probs(logits, (targets + 1) % (logits.shape[-1] * _tp_size(kwargs)), **kwargs)


def _tp_size(kwargs) -> int:
    group = kwargs.get("tp_group")
    return dist.get_world_size(group) if group is not None else 1


class HiddenChunkRounding(ImplTarget):
    """Hidden path whose chunked results differ from one pass by rounding only (about one fp32 unit), as an
    online log-sum-exp's do; it does not declare ``bit_exact``."""

    name = "impl-hidden-chunk-rounding"
    capabilities = ImplTarget.capabilities - {"bit_exact"}

    def hidden_log_probs(self, hidden, weight, targets, *, chunk_size, **kwargs):
        log_probs, entropy = super().hidden_log_probs(hidden, weight, targets, chunk_size=chunk_size, **kwargs)
        if chunk_size is None:
            return log_probs, entropy
        return log_probs * (1 + torch.finfo(torch.float32).eps), entropy


class HiddenChunkDropsRows(ImplTarget):
    """A chunking defect on the hidden path: with chunks, the last row's log-prob is lost (0)."""

    name = "impl-hidden-chunk-drops-rows"
    capabilities = ImplTarget.capabilities - {"bit_exact"}

    def hidden_log_probs(self, hidden, weight, targets, *, chunk_size, **kwargs):
        log_probs, entropy = super().hidden_log_probs(hidden, weight, targets, chunk_size=chunk_size, **kwargs)
        if chunk_size is None:
            return log_probs, entropy
        keep = torch.ones_like(log_probs)
        keep[-1] = 0
        return log_probs * keep, entropy
