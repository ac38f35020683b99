"""Running a check: its per-output verdicts, its evidence, the capabilities it needs, its ranks' collectives.

Every ``check_*`` is wrapped by ``replayable``: the outputs it judges are
collected as subtests (``harness.checks.subtests``), and any failure leaves
with the Case, the check's replay command, the warnings the ranks raised and
which of the Case's conditions each failing output needs (the diagnosis by
ablation, ``harness.checks.diagnosis``). ``require`` stops a check the target
cannot run (UNSUPPORTED, never a silent pass); ``run_ranks`` runs a job on
every rank and judges the collectives as one output among the others.
"""

from __future__ import annotations

import functools
import json
import sys

from hypothesis import reject
from hypothesis.control import currently_in_test_context
from hypothesis.errors import HypothesisException

from harness.cases import limits as case_limits
from harness.cases.case import Case
from harness.checks import diagnosis, record, subtests
from harness.checks.failure import UNSUPPORTED, mark
from harness.names import replay_environment
from harness.ranks import rank_warnings
from harness.ranks.run import assert_collectives_consistent, run_job
from harness.targets import Unsupported, load_target
from harness.targets.protocol import ENTRY_POINTS


def options_json(options: dict) -> str:
    """The keywords a test passed to a check, as a verdict holds them ("" for none)."""
    return json.dumps(options, sort_keys=True) if options else ""


def replay_command(check: str, case: Case, spec: str, options: str = "") -> str:
    """The line that reruns ``check`` on ``case``; ``options`` (``options_json``): the keywords the test passed (a
    ``_bit_for_bit`` twin's ``exact=True``), without which a pasted line would run the tolerant check and pass."""
    given = f" --options '{options}'" if options else ""
    return f"{replay_environment()}python -m harness.replay {check} --target {spec}{given} --case '{case.to_json()}'"


def replayable(fn):
    """Collect the check's per-output verdicts; attach the Case, its replay command and the evidence to a failure.

    The evidence (``harness.checks.diagnosis``): the warnings every rank
    raised during the call, and which of the Case's conditions each failing
    output needs (ablation; the reported example only).
    """

    @functools.wraps(fn)
    def wrapper(case: Case, spec: str = "impl", **kwargs):
        name = f"{fn.__module__}:{fn.__name__}"
        with rank_warnings.collecting() as seen:
            escaping = None
            with subtests.collecting() as collected:
                try:
                    result = fn(case, spec, **kwargs)
                except Unsupported:
                    raise
                except BaseException as exc:
                    escaping = exc
            exc = subtests.finish(collected, escaping)
            if exc is None:
                return result
            options = options_json(kwargs)
            replay = replay_command(name, case, spec, options)
            # the verdict's facts (the outer check wins)
            mark(exc, check=name, case=case.to_json(), options=options, replay=replay)
            exc.add_note(f"Case: {case.to_json()}")  # for a person reading the traceback
            exc.add_note(f"Replay: {replay}")
            # A verdict on the target, not yet diagnosed (a check calling another check diagnoses once, inside).
            verdict = isinstance(exc, Exception) and not isinstance(exc, HypothesisException)
            if verdict and not hasattr(exc, "diagnosis"):
                bound = functools.partial(wrapper, **kwargs)  # each ablation runs the check as the test called it
                found = diagnosis.diagnose(bound, case, spec, exc, name) if diagnosis.should_ablate() else None
                diagnosis.attach(exc, diagnosis=found, warnings=rank_warnings.merged(seen))
            raise exc

    return wrapper


def run_ranks(job, case: Case, spec: str, **options) -> list:
    """``run_job`` on every rank; whether the ranks of each group issued the same collectives is one output
    (``COLLECTIVES``) among the others, so a diverging sequence that did not hang hides no wrong value."""
    results = run_job(job, case, spec, compare_traces=False, **options)
    if case.world_size > 1:
        with subtests.subtest(subtests.COLLECTIVES):
            assert_collectives_consistent(case, results)
    return results


def require(spec: str, capabilities, every_example=frozenset()) -> None:
    """Stop a check the target cannot run: UNSUPPORTED in the verdict, never a silent pass.

    Inside a Hypothesis example the example is rejected and counted in
    the running test's record (``harness.checks.record``): the property goes on with the examples the
    target does support, and the verdict table says how many were left out
    and why (a target without ``temperature`` is still checked on every
    example at temperature 1). If every example was rejected, the plugin
    reports the test UNSUPPORTED. Outside Hypothesis, under pytest, this is a
    skip whose reason starts with ``UNSUPPORTED:``; elsewhere it raises
    Unsupported.

    ``every_example``: what the check's own code needs whatever the draw
    (a chunk-invariance check's ``chunking``). Like an entry point
    (``ENTRY_POINTS``), a target without one of them can run no example of
    the check, which is then UNSUPPORTED at its first example.
    """
    target = load_target(spec)
    needed = set(capabilities) | set(every_example)
    path = getattr(target, "capabilities_for", None)  # a family's path may lack an option its other paths have
    missing = needed - set(path(needed) if path else target.capabilities)
    if missing:
        _left_out(spec, missing, ENTRY_POINTS | set(every_example))


def require_rows_within_limits(spec: str, case: Case) -> None:
    """Leave out (UNSUPPORTED, the bound named) a hidden-state example above the target's ``max_hidden_rows``.

    The bound is a target's declared cost on this machine (``harness.cases.limits``), not a capability of its
    code: the verdict says which bound, so a check never passes on examples it did not run.
    """
    bound = case_limits.active().get("max_hidden_rows")
    if bound is not None and case.rows > bound:
        _left_out(spec, {f"more than {bound} rows per call (its case_limits)"})


def _left_out(spec: str, missing, fixed=frozenset()) -> None:
    """Reject this example (counted), or stop the check where no example can run.

    A missing capability the check's code needs on every example (``fixed``: its entry point, ``ENTRY_POINTS``,
    and what it names as ``every_example``) stops the whole property at its first example: every other example
    would need it too, and rejecting them one by one costs Hypothesis' invalid-example limit (about 460 draws)
    per property, most of a history replay's run on a family that lacks a level. Its verdict names only those
    capabilities, the ones every example needed.
    """
    name = load_target(spec).name
    always = sorted(set(missing) & set(fixed))
    message = f"target {name!r} does not support {sorted(missing)}"
    if currently_in_test_context():
        if not always:
            record.current().unsupported[(name, tuple(sorted(missing)))] += 1
            reject()
        missing = always
        message = f"target {name!r} does not support {always} (every example of the check needs it: none can run)"
    if "pytest" in sys.modules:
        skip = sys.modules["pytest"].skip.Exception(f"UNSUPPORTED: {message}", allow_module_level=True)
        raise mark(skip, kind=UNSUPPORTED, missing=sorted(missing))
    raise mark(Unsupported(message), kind=UNSUPPORTED, missing=sorted(missing))
