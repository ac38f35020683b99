"""Sub-verdicts: a check judges each output on its own, as web-platform-tests reports subtests.

A check that stops at its first failing assertion is blind to every other
output: a library whose log-probs are wrong can change its entropy, its loss
or its gradient and the check still reads as the same single failure. So a
check opens one ``subtest(OUTPUT)`` block per output it judges (log-probs,
entropy, the loss, each gradient, the graph flags, the collectives, the
inputs it must not write, memory); a failure inside a block is recorded for
that output and the check goes on with the next block. When the check ends,
the first failure is raised carrying every output's outcome
(``Facts.subtests``: output -> PASS, or FAIL with its facts), so the
verdict, the expectations and base vs PR classify per output
(``harness/gate/units.py``).

A failure outside every block (the target raised, hung, or returned outputs
of the wrong layout before any could be judged) is the check's own: the
output ``CHECK`` (the empty name), the check as a whole.

Hypothesis tells failures apart by their exception's type, raising line and
``__context__`` chain, and shrinks each separately. The raised exception's
context (hidden from printed tracebacks) is a chain of one marker per failing
(output, kind), so a failure of the log-probs alone and one of the log-probs
and the entropy together are two failures to Hypothesis: a shrink towards
the first can never hide the second.

Outside a check wrapper (``harness.checks.parity.replayable``) a block is
transparent: the assertion propagates as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from harness.checks import failure, record

# The outputs a check judges (the vocabulary of expectations and verdict tables).
CHECK = ""  # the check as a whole: a failure before any output could be judged
LOG_PROBS = "log_probs"
ENTROPY = "entropy"
LOSS = "loss"
# The loss judged on the log-probs and entropy the target itself returned (oracle loss of THOSE values): what
# the loss does with its inputs, apart from how the log-probs were computed. Its gradients w.r.t. them follow.
LOSS_OF_OWN_LOG_PROBS = "loss(log_probs)"
GRAD_LOGITS = "grad(logits)"
GRAD_LOG_PROBS = "grad(log_probs)"
GRAD_ENTROPY = "grad(entropy)"
GRAD_HIDDEN = "grad(hidden)"
GRAD_WEIGHT = "grad(weight)"
GRAPH_FLAGS = "graph"  # requires_grad / grad_fn of the returned outputs (the entropy gate)
COLLECTIVES = "collectives"  # every rank of a group issued the same collectives
INPUTS = "inputs"  # the inputs the target was handed are left unwritten
ERRORS = "errors"  # the clear error a bad input owes, on every rank
MEMORY = "memory"
PASS, FAIL = "PASS", "FAIL"


def label(output: str) -> str:
    """How an output is named to people: the check as a whole reads as ``(check)``."""
    return output or "(check)"


@dataclass
class Collected:
    """The outputs one check run judged: the first failure of each, and the ones that passed."""

    failed: dict = field(default_factory=dict)  # output -> the exception
    passed: list = field(default_factory=list)

    def passes(self) -> list[str]:
        return [name for name in self.passed if name not in self.failed]


_COLLECTED: ContextVar[Collected | None] = ContextVar("lph_subtests", default=None)


@contextmanager
def subtest(output: str) -> Iterator[None]:
    """Judge ``output``: inside a check run, a failed assertion is recorded for it and the check goes on."""
    collected = _COLLECTED.get()
    if collected is None:
        yield
        return
    try:
        yield
    except AssertionError as exc:
        failure.mark(exc, output=output)
        collected.failed.setdefault(output, exc)
        return
    if output not in collected.passed:
        collected.passed.append(output)


@contextmanager
def collecting() -> Iterator[Collected]:
    """One check run's outputs; nested runs (a check calling a check) hand their passes to the outer one."""
    outer = _COLLECTED.get()
    collected = Collected()
    token = _COLLECTED.set(collected)
    try:
        yield collected
    finally:
        _COLLECTED.reset(token)
        passes = collected.passes()
        if outer is not None:
            outer.passed.extend(name for name in passes if name not in outer.passed)
        else:
            record.current().passed_outputs.update(passes)


def sub_facts(exc: BaseException) -> dict:
    """One output's FAIL entry: its kind, headline and figures (no Case: the check's Case is the verdict's)."""
    facts = failure.facts_of(exc)
    return {"outcome": FAIL, "kind": facts.kind, "headline": facts.headline, "figures": dict(facts.figures)}


def outcomes(collected: Collected) -> dict:
    """output -> PASS or FAIL entry, in the order the check judged them (failures first)."""
    out = {name: sub_facts(exc) for name, exc in collected.failed.items()}
    out.update({name: {"outcome": PASS} for name in collected.passes()})
    return out


_MARKERS: dict[tuple, type] = {}


def _marker(output: str, kind: str) -> BaseException:
    """An exception standing for one failing (output, kind), for Hypothesis to tell failures apart by."""
    key = (output, kind)
    if key not in _MARKERS:
        _MARKERS[key] = type(f"Failing[{label(output)}, {kind}]", (Exception,), {"__module__": __name__})
    return _MARKERS[key](f"{label(output)} fails as {kind}")


def _primary(failed: dict) -> BaseException:
    """The exception to raise: the first failure that is more than rounding in the working dtype, else the first."""
    real = [exc for exc in failed.values() if failure.facts_of(exc).kind != failure.PRECISION]
    return (real or list(failed.values()))[0]


def finish(collected: Collected, escaping: BaseException | None) -> BaseException | None:
    """What the check run raises: ``escaping`` (a failure outside every block) or the primary output failure,
    either carrying every output's outcome; None when nothing failed."""
    if not collected.failed:
        if escaping is not None and collected.passes():
            failure.mark(escaping, subtests={**outcomes(collected), **failure.given_subtests(escaping)})
        return escaping
    if escaping is not None:
        failure.mark(escaping, subtests={**outcomes(collected), **failure.given_subtests(escaping)})
        return escaping
    primary = _primary(collected.failed)
    failure.mark(primary, subtests=outcomes(collected))
    chain: BaseException | None = None
    for output, exc in reversed(list(collected.failed.items())):
        marker = _marker(output, failure.facts_of(exc).kind)
        marker.__context__ = chain
        chain = marker
    primary.__context__, primary.__suppress_context__ = chain, True
    for output, exc in collected.failed.items():
        if exc is not primary:
            primary.add_note(f"Also failing, {label(output)}: {failure.headline(exc)}")
    return primary
