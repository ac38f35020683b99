"""Diagnosis by ablation: which of a failing Case's conditions the failure needs.

A shrunk Case says *where* a check fails, not *why*: a backward-parity
failure at ``tp=2, bf16, chunk_size=3, with_entropy`` could be the entropy
term, the TP reduction, the rounding of bf16 or the chunk loop. Replaying the
Case by hand with one condition removed at a time answers that; this module
does it for every failing check (the domain form of Hypothesis' generic
``explain`` phase). Each *ablation* (``ablations.py``) removes one condition the Case has
(entropy gradient off, ``tp -> 1``, ``cp -> 1``, dtype -> float32, chunking
off, temperature 1, special values removed, one sample; and each loss option
a policy Case carries: its kind, the dual clip, the KL term and its ratio
weighting, the rollout correction, the aggregation; and a sampling Case's
kept-set form and each of top-k, top-p, min-p) and replays the same check on
the same target. Each failing OUTPUT of the check (``harness.checks.subtests``)
is judged on its own, so the diagnosis says which outputs are wrong (a value
or a gradient) and what each needs:

* the output passes on the ablated Case: it **needs** that condition;
* it fails the same way (the same kind and exception type; for a failure of
  the check as a whole, the same raising line): it is **independent of** it;
* anything else (another exception type, a hang, a capability the target
  lacks, the check failing before it judged the output, a Case the condition
  cannot be removed from) leaves it **undetermined**, with the reason.

Then every independent condition is removed at once and the result replayed:
if it still fails, the conditions named as needed are together sufficient,
and that smaller Case (``minimal_case``) is the one to debug.

Bounded: a hang-class failure is not ablated (each trial could wait out a
whole deadline; its report already names the stuck rank), and trials stop
once ``LPH_ABLATION_BUDGET_S`` (default 20 s) is spent on one failure.
``LPH_ABLATION=0`` switches ablation off (to measure its cost, or when only
the verdict matters). Inside Hypothesis only the final, reported example is
ablated, never the examples met while shrinking.

The result is data (``Diagnosis.as_dict``; ``outputs`` holds each failing
output's conditions, the top-level lists are the raised output's): the check wrapper
(``harness.checks.running.replayable``) puts it on the exception as
``exc.diagnosis`` and in the running test's record, with the warnings the
ranks raised (``attach``); a one-line summary is also added as a note, for a
reader of the raw traceback.
"""

from __future__ import annotations

import contextvars
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from hypothesis.control import current_build_context, currently_in_test_context
from hypothesis.errors import HypothesisException

from harness.cases.case import Case
from harness.checks import failure as failure_facts
from harness.checks import record, subtests, tolerance
from harness.checks.ablations import ALL_ABLATIONS, Ablation
from harness.ranks import hang_memo
from harness.ranks.errors import PoolStartError, RankHang
from harness.targets import Unsupported

DEFAULT_BUDGET_S = 20.0
# Every check raises through these: a failure's own line is the innermost one outside them.
_HELPERS = frozenset({failure_facts.__file__, tolerance.__file__})

NEEDS, INDEPENDENT, UNDETERMINED = "needs", "independent", "undetermined"

_ABLATING: contextvars.ContextVar[bool] = contextvars.ContextVar("lph_ablating", default=False)


@dataclass
class Trial:
    dimension: str
    condition: str
    verdict: str  # NEEDS / INDEPENDENT / UNDETERMINED, for the raised output
    detail: str  # "passes", "fails (AssertionError)", "fails differently (RankError)", "unsupported", ...
    case: str  # the ablated Case's JSON ("" when none could be built)
    seconds: float
    outputs: dict = field(default_factory=dict)  # failing output -> [verdict, detail]


@dataclass
class Conditions:
    """What one failing output needs, by condition (for people) and by dimension (for signatures)."""

    needs: list[str] = field(default_factory=list)
    needs_dimensions: list[str] = field(default_factory=list)
    independent_of: list[str] = field(default_factory=list)
    undetermined: list[str] = field(default_factory=list)

    def add(self, verdict: str, dimension: str, condition: str, detail: str) -> None:
        if verdict == NEEDS:
            self.needs.append(condition)
            self.needs_dimensions.append(dimension)
        elif verdict == INDEPENDENT:
            self.independent_of.append(dimension)
        else:
            self.undetermined.append(f"{condition} ({detail})")

    def summary(self) -> str:
        parts = [f"needs: {', '.join(self.needs) if self.needs else 'none of the conditions tried'}"]
        if self.independent_of:
            parts.append(f"independent of: {', '.join(self.independent_of)}")
        if self.undetermined:
            parts.append(f"undetermined: {', '.join(self.undetermined)}")
        return "; ".join(parts)


VALUE_OUTPUTS = frozenset({subtests.LOG_PROBS, subtests.ENTROPY, subtests.LOSS, subtests.LOSS_OF_OWN_LOG_PROBS})


def wrong_outputs(outcomes: dict) -> str:
    """Which kind of output is wrong, from a check run's per-output outcomes: ``values (log_probs); gradients
    right (grad(logits))``, ``gradients (grad(logits)); values right (log_probs, entropy)``; empty if unknown."""
    failing = [o for o, entry in outcomes.items() if entry.get("outcome") == subtests.FAIL and o]
    passing = [o for o, entry in outcomes.items() if entry.get("outcome") == subtests.PASS]
    if not failing:
        return ""

    def group(names):
        values = [n for n in names if n in VALUE_OUTPUTS]
        grads = [n for n in names if n.startswith("grad(")]
        other = [n for n in names if n not in values and n not in grads]
        return {"values": values, "gradients": grads, "other": other}

    wrong, right = group(failing), group(passing)
    parts = [f"{name} ({', '.join(wrong[name])})" for name in ("values", "gradients", "other") if wrong[name]]
    line = f"wrong: {', '.join(parts)}"
    kept = [f"{name} ({', '.join(right[name])})" for name in ("values", "gradients") if right[name] and not wrong[name]]
    return line + (f"; right: {', '.join(kept)}" if kept else "")


@dataclass
class Diagnosis:
    check: str
    needs: list[str] = field(default_factory=list)  # of the raised output (the first failing one)
    independent_of: list[str] = field(default_factory=list)
    undetermined: list[str] = field(default_factory=list)
    minimal_case: str | None = None  # every condition the raised output is independent of removed, still failing
    skipped: str = ""  # why nothing was ablated
    seconds: float = 0.0
    trials: list[Trial] = field(default_factory=list)
    outputs: dict = field(default_factory=dict)  # failing output -> Conditions
    wrong: str = ""  # which outputs are wrong and which are right (``wrong_outputs``)

    def summary(self) -> str:
        if self.skipped:
            return f"not ablated: {self.skipped}"
        distinct = {conditions.summary() for conditions in self.outputs.values()}
        if len(distinct) <= 1:
            head = Conditions(self.needs, [], self.independent_of, self.undetermined).summary()
        else:
            head = "; ".join(f"{subtests.label(o)} {c.summary()}" for o, c in self.outputs.items())
        return f"{head}; {self.wrong}" if self.wrong else head

    def as_dict(self) -> dict:
        out = asdict(self)
        out["summary"] = self.summary()
        return out


def enabled() -> bool:
    return os.environ.get("LPH_ABLATION", "1") != "0"


def budget_s() -> float:
    text = os.environ.get("LPH_ABLATION_BUDGET_S", str(DEFAULT_BUDGET_S))
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"LPH_ABLATION_BUDGET_S must be a number of seconds, got {text!r}") from None
    return value


def should_ablate() -> bool:
    """Ablate this failure: switched on, not already inside an ablation, and the reported example if in Hypothesis."""
    if not enabled() or _ABLATING.get():
        return False
    return not currently_in_test_context() or current_build_context().is_final


def _isolated(check: Callable, case: Case, spec: str) -> tuple[BaseException | None, set]:
    """Run ``check`` on ``case`` with a scratch test record and hang memo: (the exception or None, the outputs
    it judged and passed)."""

    def run() -> tuple[BaseException | None, set]:
        _ABLATING.set(True)
        scratch = record.TestRecord()
        record.use(scratch)  # a trial's rejections, figures and passes are not the test's
        hang_memo.use(hang_memo.HangMemo())  # nor its hangs: the test's memo must not reject later examples
        try:
            check(case, spec)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # pytest's skip is a BaseException: an UNSUPPORTED trial
            return exc, set(scratch.passed_outputs)
        return None, set(scratch.passed_outputs)

    return contextvars.copy_context().run(run)


def _skip_types() -> tuple:
    """pytest's skip exception (how ``require`` reports UNSUPPORTED under pytest), if pytest is loaded."""
    pytest = sys.modules.get("pytest")
    return (pytest.skip.Exception,) if pytest is not None else ()


def _failing(exc: BaseException) -> dict:
    """output -> (kind, exception type name) of every failing output of one check run."""
    found = failure_facts.facts_of(exc).subtests
    return {
        output: (entry.get("kind", ""), entry.get("headline", "").partition(":")[0])
        for output, entry in found.items()
        if entry.get("outcome") == subtests.FAIL
    }


def _judge(failure: BaseException, trial: tuple, output: str) -> tuple[str, str]:
    """One failing output of ``failure`` on an ablated Case: needed, independent or undetermined."""
    outcome, passed = trial
    if outcome is None:
        if output == subtests.CHECK or output in passed:
            return NEEDS, "passes"
        return UNDETERMINED, "not judged without it"
    name = type(outcome).__name__
    if isinstance(outcome, (HypothesisException, Unsupported, *_skip_types())):
        return UNDETERMINED, "unsupported by the target"
    if isinstance(outcome, RankHang):
        return UNDETERMINED, f"hangs ({name})"
    now, before = _failing(outcome), _failing(failure)
    if output == subtests.CHECK:
        if subtests.CHECK not in now:
            return NEEDS, "returns"
        if _origin(outcome) == _origin(failure):
            return INDEPENDENT, f"fails ({name})"
        file, line = _origin(outcome)[2:]
        return UNDETERMINED, f"fails differently ({name} at {os.path.basename(file)}:{line})"
    if output in now:
        if now[output] == before[output]:
            return INDEPENDENT, f"fails ({now[output][1] or name})"
        return UNDETERMINED, f"fails differently ({now[output][0]}, {now[output][1]})"
    if output in passed:
        return NEEDS, "passes"
    if subtests.CHECK in now:
        return UNDETERMINED, f"the check fails before judging it ({name})"
    return UNDETERMINED, "not judged without it"


def _origin(exc: BaseException) -> tuple:
    """What makes two failures of the check as a whole the same one: type, failure kind, and the check's line that
    raised it.

    A check whose precondition fails on the ablated Case (``assert case.tp > 1``)
    raises the same type as its real failure, from another line. The line is the
    innermost one outside the helpers every check raises through
    (``failure.ensure``, the tolerance comparisons), which would make all
    failures look alike.
    """
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    own = [tb for tb in frames if tb.tb_frame.f_code.co_filename not in _HELPERS] or frames
    kind = failure_facts.facts_of(exc).kind
    if not own:
        return (type(exc), kind, "", 0)
    return (type(exc), kind, own[-1].tb_frame.f_code.co_filename, own[-1].tb_lineno)


def _raised_output(failure: BaseException) -> str:
    """The output the raised exception is about (the first failing one), or the check as a whole."""
    failing, output = _failing(failure), failure_facts.facts_of(failure).output
    return output if output in failing else next(iter(failing), subtests.CHECK)


def diagnose(check: Callable, case: Case, spec: str, failure: BaseException, name: str = "") -> Diagnosis:
    """Ablate ``case``'s conditions one at a time under ``check`` (which failed with ``failure``), per output."""
    name = name or getattr(check, "__name__", repr(check))
    result = Diagnosis(check=name)
    if isinstance(failure, RankHang):
        result.skipped = f"a hang-class failure ({type(failure).__name__}): each trial could wait out a deadline"
        return result
    if isinstance(failure, PoolStartError):
        result.skipped = "the rank pool did not start: no verdict on the target to ablate"
        return result
    outputs = list(_failing(failure)) or [subtests.CHECK]
    raised = _raised_output(failure)
    conditions = {output: Conditions() for output in outputs}
    started, limit = time.monotonic(), budget_s()
    independent: list[Ablation] = []
    for ablation in ALL_ABLATIONS:
        try:
            variant = ablation.remove(case)
        except ValueError as exc:  # the Case cannot exist without this condition
            for each in conditions.values():
                each.add(UNDETERMINED, ablation.dimension, ablation.dimension, f"cannot be removed: {exc}")
            continue
        if variant is None:
            continue
        condition = ablation.condition(case, name)
        if time.monotonic() - started >= limit:
            for each in conditions.values():
                each.add(UNDETERMINED, ablation.dimension, condition, f"time budget of {limit:g} s spent")
            continue
        t0 = time.monotonic()
        trial = _isolated(check, variant, spec)
        judged = {output: _judge(failure, trial, output) for output in outputs}
        for output, (verdict, detail) in judged.items():
            conditions[output].add(verdict, ablation.dimension, condition, detail)
        verdict, detail = judged[raised]
        result.trials.append(
            Trial(
                ablation.dimension,
                condition,
                verdict,
                detail,
                variant.to_json(),
                time.monotonic() - t0,
                {o: list(v) for o, v in judged.items()},
            )
        )
        if verdict == INDEPENDENT:
            independent.append(ablation)
    mine = conditions[raised]
    result.needs, result.independent_of, result.undetermined = mine.needs, mine.independent_of, mine.undetermined
    result.outputs = conditions
    result.wrong = wrong_outputs(failure_facts.given_subtests(failure))
    if len(independent) > 1 and time.monotonic() - started < limit:
        result.minimal_case = _confirm(check, case, spec, failure, independent, raised)
    elif len(independent) == 1:
        result.minimal_case = next(t.case for t in result.trials if t.verdict == INDEPENDENT)
    result.seconds = time.monotonic() - started
    return result


def _confirm(
    check: Callable, case: Case, spec: str, failure: BaseException, independent: list, output: str
) -> str | None:
    """Every independent condition removed at once: the Case's JSON if it still fails the same way."""
    smaller = case
    try:
        for ablation in independent:
            smaller = ablation.remove(smaller) or smaller
    except ValueError:
        return None
    verdict, _ = _judge(failure, _isolated(check, smaller, spec), output)
    return smaller.to_json() if verdict == INDEPENDENT else None


def attach(exc: BaseException, *, diagnosis: Diagnosis | None, warnings: list) -> None:
    """Put a failure's evidence on the exception (``exc.diagnosis``, ``exc.rank_warnings``) and in the record.

    The record also keeps whether the failure was precision only (``PrecisionOnly.precision_only``).
    """
    facts = diagnosis.as_dict() if diagnosis is not None else None
    exc.diagnosis = facts
    exc.rank_warnings = warnings
    current = record.current()
    current.diagnosis = facts
    current.warnings = warnings
    precision = bool(getattr(exc, "precision_only", False))
    current.precision_only = precision if current.precision_only is None else current.precision_only and precision
    if diagnosis is not None:
        exc.add_note(f"Diagnosis: {diagnosis.summary()}")
    for entry in warnings:
        exc.add_note(f"Warning on rank(s) {entry['ranks']}: {entry['category']}: {entry['message']}")
