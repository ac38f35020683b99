"""A check failure's facts as data: what kind of failure, on which Case, how to replay it, what was measured.

A verdict must never depend on the wording of a message: the gate decides
hangs, infrastructure errors, replays and missing capabilities from these
facts, and an expectation records the kind a known failure has (a known
wrong value that turns into a hang is a different defect). So every way a
check can fail sets its facts on the exception it raises:

* ``CheckFailure`` (an ``AssertionError``) names its ``kind`` and figures;
  checks raise it through ``ensure(condition, kind, message)`` or the
  tolerance helpers (``harness/checks/tolerance.py``);
* the rank pool's exceptions (``harness/ranks/errors.py``) carry a class
  attribute ``failure_kind`` (``hang``, ``error``, ``pool_start``) and, for a
  hang, whether a rank finished without joining its peers' collective;
* ``mark(exc, ...)`` adds the Case, the check and its replay command
  (``harness.checks.parity.replayable``) to whatever was raised, and the
  outcome of every output the check judged (``subtests``,
  ``harness/checks/subtests.py``).

``facts_of(exc)`` reads them back (the pytest plugin writes them into
``verdicts.json``; the replay command's child does the same), each failing
output with its signature (``harness/checks/signature.py``). Messages stay
as readable as before; nothing downstream parses them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from harness.checks import signature

# The kinds of failure (an expectation's ``kind``; docs/gate.md, "Expectations").
VALUE = "value"  # a forward output (log-prob, entropy, loss) outside the tolerance or not bit-identical
GRADIENT = "gradient"  # a gradient outside the tolerance or not bit-identical
GRAPH = "graph"  # autograd flags: a gated-off output with a graph, or an output that lost its graph
MUTATION = "mutation"  # the target wrote into a tensor the caller still owns
LAYOUT = "layout"  # outputs of the wrong shape, coverage or padding (CP placement, samples, ranks)
MEMORY = "memory"  # a measured peak above its bound
ACCEPTED = "accepted"  # bad input accepted: values returned where a clear error was owed
UNCLEAR = "unclear"  # bad input refused, but not with the error type or words the contract asks for
HANG = "hang"  # a rank never returned (RankHang, CollectiveHang)
COLLECTIVES = "collectives"  # the ranks of a group issued different collectives (a hang in waiting, bug 5)
ERROR = "error"  # the target raised where it should have returned (any exception but a failed check)
CRASH = "crash"  # the target killed the test process (a signal such as SIGSEGV): decided by the gate's journal
POOL_START = "pool_start"  # the rank pool could not start: the machine's fault, never the target's
LOAD = "load"  # the target's code could not be loaded (a file, symbol or import missing): no check of it ran
UNSUPPORTED = "unsupported"  # the target lacks a capability the check needs
ASSERTION = "assertion"  # a failed plain assertion no kind was given for
# Over the tolerance bound, but within what rounding in the Case's working dtype explains at the output's magnitude:
# a precision verdict, which the plugin places in the hardening tier whatever the check's tier (never a contract red).
PRECISION = "precision"

FAILURE_KINDS = (
    VALUE,
    GRADIENT,
    GRAPH,
    MUTATION,
    LAYOUT,
    MEMORY,
    ACCEPTED,
    UNCLEAR,
    HANG,
    COLLECTIVES,
    ERROR,
    CRASH,
    ASSERTION,
    PRECISION,
)
KINDS = (*FAILURE_KINDS, POOL_START, LOAD, UNSUPPORTED)
UNDECIDED = (POOL_START, LOAD)  # kinds the gate reads as ERROR: no verdict on the target's behaviour

_ATTRIBUTE = "lph_facts"


@dataclass
class Facts:
    """What a verdict needs to know about a failure, without reading its message."""

    kind: str = ""
    headline: str = ""  # the exception's type and first line, for people (never parsed)
    check: str = ""  # module:function of a replayable check
    case: str = ""  # the Case as JSON
    options: str = ""  # the keywords the test passed to the check (``exact=True``, ``level=``) as JSON, "" for none
    replay: str = ""  # the one-line replay command
    figures: dict = field(default_factory=dict)  # e.g. max_error, bound, peak_bytes
    missing: list = field(default_factory=list)  # for UNSUPPORTED: the capabilities the target lacked
    diverged: bool = False  # a hang where a rank FINISHED without joining its peers' collective
    diagnosis: dict = field(default_factory=dict)  # which of the Case's conditions the failure needs (ablation)
    warnings: list = field(default_factory=list)  # warnings the ranks raised during the failing call, deduplicated
    output: str = ""  # the output a subtest failure is about ("" : the check as a whole)
    # output -> {"outcome": PASS} or {"outcome": FAIL, kind, headline, figures, signature} (harness.checks.subtests)
    subtests: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class CheckFailure(AssertionError):
    """A check that failed, and how (``kind``); ``figures`` are what it measured."""

    def __init__(self, message: str, *, kind: str, figures: dict | None = None):
        if kind not in KINDS:
            raise ValueError(f"CheckFailure kind={kind!r}: use one of {KINDS}")
        super().__init__(message)
        mark(self, kind=kind, figures=dict(figures or {}))


def ensure(condition, kind: str, message) -> None:
    """``assert condition, message`` that says what kind of failure it is; ``message`` may be a callable."""
    if not condition:
        raise CheckFailure(message() if callable(message) else str(message), kind=kind)


def mark(exc: BaseException, **facts) -> BaseException:
    """Set facts on ``exc`` (later values win; figures are merged). Returns ``exc``."""
    unknown = set(facts) - set(Facts.__dataclass_fields__)
    if unknown:
        raise TypeError(f"mark(): unknown facts {sorted(unknown)}")
    current = dict(getattr(exc, _ATTRIBUTE, {}))
    if "figures" in facts:
        facts = {**facts, "figures": {**current.get("figures", {}), **facts["figures"]}}
    current.update(facts)
    try:
        setattr(exc, _ATTRIBUTE, current)
    except AttributeError:  # an exception type with __slots__: its facts stay unknown, its kind falls back
        pass
    return exc


def headline(exc: BaseException) -> str:
    """``Type: first line of the message``: what a person reads first."""
    name = type(exc).__qualname__
    text = str(exc).strip().splitlines()
    if not text:
        return name
    line = f"{name}: {text[0]}"
    return line if len(line) <= 240 else line[:239] + "…"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _kind(exc: BaseException, given: dict) -> str:
    if given.get("kind"):
        return given["kind"]
    declared = getattr(type(exc), "failure_kind", "")
    if declared:
        return declared
    return ASSERTION if isinstance(exc, AssertionError) else ERROR


def given_subtests(exc: BaseException) -> dict:
    """The per-output outcomes already set on ``exc`` (by an inner check run), without signatures."""
    return dict(getattr(exc, _ATTRIBUTE, {}).get("subtests", {}))


def _subtests_of(leaf: BaseException, kind: str, headline_: str, figures: dict) -> dict:
    """A leaf's per-output outcomes, each failure with its signature; a leaf that judged no output is a failure of
    the check as a whole (output ``""``)."""
    outcomes = given_subtests(leaf)
    if not any(entry.get("outcome") == "FAIL" for entry in outcomes.values()):
        outcomes[""] = {"outcome": "FAIL", "kind": kind, "headline": headline_, "figures": dict(figures)}
    diagnosed = (getattr(leaf, "diagnosis", None) or {}).get("outputs", {})
    return {
        output: {**entry, "signature": signature.of(entry, diagnosed.get(output))}
        if entry.get("outcome") == "FAIL"
        else entry
        for output, entry in outcomes.items()
    }


def _weight(entry: dict) -> int:
    """A true defect beats a precision-only failure, which beats a pass."""
    if entry.get("outcome") != "FAIL":
        return 0
    return 1 if entry.get("kind") == PRECISION else 2


def merged_subtests(per_leaf: list[dict]) -> dict:
    """Several failures of one test (a Hypothesis group): per output, a true defect beats a precision-only
    failure, which beats a pass; among equals the first wins."""
    merged: dict = {}
    for outcomes in per_leaf:
        for output, entry in outcomes.items():
            if output not in merged or _weight(entry) > _weight(merged[output]):
                merged[output] = entry
    return merged


def facts_of(exc: BaseException) -> Facts:
    """The facts of a failure. Of a group (Hypothesis found several distinct failures), the last one's that
    carries a Case and is not precision only (a group holding a true defect is judged by the defect); else the
    last one's with a Case; else the last leaf. The per-output outcomes are every leaf's, merged."""
    leaves = _leaves(exc)

    def rank(leaf: BaseException) -> tuple[bool, bool]:
        given = getattr(leaf, _ATTRIBUTE, {})
        return bool(given.get("case")), given.get("kind") != PRECISION

    best = max(rank(leaf) for leaf in leaves)
    chosen = [leaf for leaf in leaves if rank(leaf) == best][-1]
    given = dict(getattr(chosen, _ATTRIBUTE, {}))
    # Evidence other stages set as plain attributes (the rank pool, the diagnosis by ablation).
    for name, attribute in (("diverged", "diverged"), ("diagnosis", "diagnosis"), ("warnings", "rank_warnings")):
        if not given.get(name) and getattr(chosen, attribute, None):
            given[name] = getattr(chosen, attribute)
    given["kind"] = _kind(chosen, given)
    given.setdefault("headline", headline(chosen))
    per_leaf = []
    for leaf in leaves:
        facts = getattr(leaf, _ATTRIBUTE, {})
        per_leaf.append(
            _subtests_of(leaf, _kind(leaf, facts), facts.get("headline") or headline(leaf), facts.get("figures", {}))
        )
    given["subtests"] = merged_subtests(per_leaf)
    return Facts(**given)
