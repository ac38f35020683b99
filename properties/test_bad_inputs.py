"""Bad input gets a clear error naming the argument, never a wrong answer or a crash.

A table (OpInfo's ``error_inputs`` habit): each row builds one bad call on a
small valid Case, and names the exception type and the word the message must
carry. Upstream code silently returns a log-prob of 0 for a target outside
every shard (docs/bugs.md); the contract here is a ValueError naming ``targets``.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
import torch

from harness.cases.case import Case
from harness.checks.failure import ACCEPTED, UNCLEAR, CheckFailure, ensure
from harness.checks.parity import require
from harness.jobs.bad_inputs import asks_entropy
from harness.jobs.logits import packed_inputs
from harness.targets import load_target

pytestmark = pytest.mark.tier("hardening")

BASE = Case(seed=11, vocab=10, samples=((5, 3), (4, 2)), mask_mode="mixed")


@dataclass(frozen=True)
class BadInput:
    name: str
    level: str
    call: Callable
    error: type
    mentions: str
    # The capabilities the bad call exercises beyond its level: where the target lacks one, the adapter's guard
    # answers before upstream code sees the input, which says nothing of that code (UNSUPPORTED, not a verdict).
    needs: frozenset = frozenset()


def _token(target, *, logits=None, targets=None, chunk_size=None, temperature=1.0):
    logits = BASE.rank_logits(0) if logits is None else logits
    targets = BASE.row_targets() if targets is None else targets
    return target.token_log_probs(
        logits,
        targets,
        tp_group=None,
        chunk_size=chunk_size,
        with_entropy=asks_entropy(target),
        entropy_grad=True,
        temperature=temperature,
    )


def _packed(target, *, logits=None, response_only=False, loss_mask_only=False, **changes):
    logits = BASE.rank_logits(0) if logits is None else logits
    inputs = replace(packed_inputs(BASE), **changes)
    return target.packed_log_probs(
        logits,
        inputs,
        tp_group=None,
        cp_group=None,
        chunk_size=None,
        with_entropy=asks_entropy(target),
        entropy_grad=True,
        temperature=1.0,
        response_only=response_only,
        loss_mask_only=loss_mask_only,
    )


def _policy(target, *, advantages):
    inputs = packed_inputs(BASE)
    old = [torch.zeros(r) for r in BASE.response_lengths]
    return target.policy_loss(
        BASE.rank_logits(0),
        inputs,
        advantages=advantages,
        old_log_probs=old,
        eps_clip=0.2,
        eps_clip_high=0.2,
        entropy_coef=0.0,
        with_entropy=asks_entropy(target),
        tp_group=None,
        cp_group=None,
        chunk_size=None,
        temperature=1.0,
        response_only=False,
        loss_mask_only=False,
    )


def _targets_with(value):
    targets = BASE.row_targets().clone()
    targets[1] = value
    return targets


CHUNKING, TEMPERATURE = frozenset({"chunking"}), frozenset({"temperature"})
BAD_INPUTS = [
    BadInput("chunk_size zero", "token", lambda t: _token(t, chunk_size=0), ValueError, "chunk_size", CHUNKING),
    BadInput("chunk_size negative", "token", lambda t: _token(t, chunk_size=-3), ValueError, "chunk_size", CHUNKING),
    BadInput("target id == V", "token", lambda t: _token(t, targets=_targets_with(BASE.vocab)), ValueError, "targets"),
    BadInput(
        "target id V+5", "token", lambda t: _token(t, targets=_targets_with(BASE.vocab + 5)), ValueError, "targets"
    ),
    BadInput("target id negative", "token", lambda t: _token(t, targets=_targets_with(-1)), ValueError, "targets"),
    BadInput("temperature zero", "token", lambda t: _token(t, temperature=0.0), ValueError, "temperature", TEMPERATURE),
    BadInput(
        "temperature negative", "token", lambda t: _token(t, temperature=-1.0), ValueError, "temperature", TEMPERATURE
    ),
    BadInput("1-D logits", "token", lambda t: _token(t, logits=BASE.rank_logits(0)[0]), ValueError, "logits"),
    BadInput("integer logits", "token", lambda t: _token(t, logits=BASE.rank_logits(0).long()), TypeError, "logits"),
    BadInput("targets length", "token", lambda t: _token(t, targets=BASE.row_targets()[:-1]), ValueError, "targets"),
    BadInput("float targets", "token", lambda t: _token(t, targets=BASE.row_targets().float()), TypeError, "targets"),
    BadInput(
        "response longer than sample - 1",
        "packed",
        lambda t: _packed(t, response_lengths=[5, 2]),
        ValueError,
        "response_lengths",
    ),
    BadInput(
        "tokens length",
        "packed",
        lambda t: _packed(t, tokens=[BASE.tokens()[0][:-1], BASE.tokens()[1]]),
        ValueError,
        "tokens",
    ),
    BadInput("too few logits rows", "packed", lambda t: _packed(t, logits=BASE.rank_logits(0)[:4]), ValueError, "rows"),
    BadInput(
        "loss_mask_only without response_only",
        "packed",
        lambda t: _packed(t, loss_mask_only=True),
        ValueError,
        "loss_mask_only",
        frozenset({"loss_mask_only"}),
    ),
    BadInput(
        "loss mask length",
        "packed",
        lambda t: _packed(t, loss_masks=[torch.ones(2), torch.ones(2)]),
        ValueError,
        "loss_masks",
    ),
    BadInput("unknown qkv_format", "packed", lambda t: _packed(t, qkv_format="sbhd"), ValueError, "qkv_format"),
    BadInput(
        "bshd rows not B*S", "packed", lambda t: _packed(t, qkv_format="bshd"), ValueError, "bshd", frozenset({"bshd"})
    ),
    BadInput(
        "allgather CP with bshd",
        "packed",
        lambda t: _packed(t, qkv_format="bshd", cp_mode="allgather"),
        ValueError,
        "qkv_format='thd'",
        frozenset({"bshd", "cp_allgather"}),
    ),
    BadInput("unknown cp_mode", "packed", lambda t: _packed(t, cp_mode="ring"), ValueError, "cp_mode"),
    BadInput(
        "advantages length",
        "policy_loss",
        lambda t: _policy(t, advantages=[torch.ones(3), torch.ones(1)]),
        ValueError,
        "advantages",
    ),
]


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda bad: bad.name)
def test_bad_input_raises_clear_error(bad, spec):
    # A bad value of an option the target does not take is not the target's to refuse.
    require(spec, {bad.level} | bad.needs)
    try:
        bad.call(load_target(spec))
    except bad.error as exc:
        error = exc
    except Exception as exc:
        message = f"raised {type(exc).__name__}: {exc} (the contract: {bad.error.__name__} naming {bad.mentions!r})"
        raise CheckFailure(message, kind=UNCLEAR) from exc
    else:
        raise CheckFailure(f"returned values instead of raising {bad.error.__name__}", kind=ACCEPTED)
    ensure(bad.mentions in str(error), UNCLEAR, f"the error must name {bad.mentions!r}; got: {error}")
