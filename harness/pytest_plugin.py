"""pytest wiring: the --target option, Hypothesis profiles, the verdict table and case counts.

Loaded from the root conftest.py. Every check carries exactly one tier
(``@pytest.mark.tier``, harness/gate/tiers.py), shown in the verdict table,
the JUnit properties and the JSON. The verdict table (check, tier, outcome,
shrunk counterexample, replay command), grouped by tier with the named
regressions first, is printed at the end of every session and, with
``--report-dir``, written as ``report.md`` and ``verdicts.json`` (what the
gate reads) next to pytest's JUnit XML. A check skipped with an
``UNSUPPORTED:`` reason is reported as UNSUPPORTED, never as a pass.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Unsatisfiable

from harness.cases import limits as case_limits
from harness.cases import stats
from harness.checks import failure, record
from harness.gate import journal, render
from harness.gate.order import order_items
from harness.gate.render import Row
from harness.gate.specs import hypothesis_profile
from harness.gate.tiers import HARDENING, MARKER, SELF_TEST, TIERS, tier_of_item
from harness.gate.units import units_of, whole
from harness.gate.verdicts import (
    ERROR,
    FAIL,
    HANG,
    PASS,
    SKIPPED,
    UNSUPPORTED,
    VERDICTS_FILE,
    Run,
    Verdict,
)
from harness.names import replay_environment
from harness.ranks import hang_memo
from harness.ranks.pool import shutdown_all
from harness.targets import load_target


def register_profiles() -> None:
    """The Hypothesis profiles (idempotent: registering a name again replaces it)."""
    base = settings(
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    no_shrink = [Phase.explicit, Phase.generate]
    # dev: quick local feedback. ci: derandomised, no example database (reproducible CI).
    settings.register_profile("dev", base, max_examples=15)
    ci = settings(base, max_examples=80, derandomize=True, database=None)
    settings.register_profile("ci", ci)
    # suite: `nox -s tests` (CI and a developer's machine alike), every property on impl within minutes on two
    # cores: ci's settings with 50 examples. Every bug class's representative mutant is killed at 40 (`mutants`);
    # the gate keeps ci's 80 for upstream code, which the suite never runs.
    settings.register_profile("suite", ci, max_examples=50)
    # mutants: like ci but without shrinking, and stopping at the first failing example, explicit ones included (a
    # mutant is killed by one failure; which others fail is not read). thorough: >= 1000 random examples.
    settings.register_profile(
        "mutants",
        base,
        max_examples=40,
        derandomize=True,
        database=None,
        phases=no_shrink,
        report_multiple_bugs=False,
    )
    settings.register_profile("thorough", base, max_examples=1000, phases=list(Phase))
    # interpreter: the Triton backend under Triton's CPU interpreter in `nox -s tests` (milliseconds per kernel
    # op): few derandomised examples per property, shrinking kept so a failure still reads small.
    settings.register_profile("interpreter", base, max_examples=6, derandomize=True, database=None)
    # smoke: the gate's own end-to-end self-tests (a few derandomised examples, no shrinking).
    settings.register_profile("smoke", base, max_examples=8, derandomize=True, database=None, phases=no_shrink)
    # history: a replay of a family's history (harness/gate/history.py), hundreds of suite runs: smoke's settings
    # with 3 examples per property (the explicit special-value examples all run); said in each table's header.
    settings.register_profile("history", base, max_examples=3, derandomize=True, database=None, phases=no_shrink)
    # device: ci's settings without shrinking and with 20 examples, for a time-boxed GPU run (bench.gpu_quick):
    # shrinking a failure could outlast the step's limit and lose the verdict (the failing example is still
    # printed), and on an H200 a kernel property took about a minute per 15 examples (Triton compiles each new
    # shape), so ci's 80 did not finish in the step's time.
    settings.register_profile("device", ci, phases=no_shrink, max_examples=20)


# Per-run and per-test state lives in pytest's stashes, never in module globals.
VERDICTS = pytest.StashKey[dict]()  # config: node id -> Verdict (on the controller)
STATS_DIR = pytest.StashKey[Path]()  # config: where xdist workers leave their case counts
RECORD = pytest.StashKey[record.TestRecord]()  # item: figures and UNSUPPORTED examples of the test
MEMO = pytest.StashKey[hang_memo.HangMemo]()  # item: the test's hung examples
FACTS = "facts"  # the report's user property holding a failure's or skip's facts (harness.checks.failure)


def pytest_addoption(parser):
    group = parser.getgroup("lph", "log-prob harness")
    group.addoption(
        "--target",
        default=os.environ.get("LPH_TARGET", "impl"),
        help="implementation under test: impl (default), package.module:attr or path/to/file.py:attr",
    )
    group.addoption(
        "--report-dir", default=None, help="write report.md (verdict table) here; pair with --junitxml=<dir>/junit.xml"
    )


@pytest.fixture(scope="session")
def spec(request) -> str:
    """The target spec every property and regression checks; its declared ``case_limits`` bound the strategies."""
    spec = request.config.getoption("--target")
    case_limits.activate(getattr(load_target(spec), "case_limits", None))
    return spec


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


_STATS_ENV = "LPH_STATS_DIR"  # xdist workers are processes: they find the controller's directory here


def pytest_configure(config):
    """Hypothesis profiles, the tier marker, the verdict store and a fresh directory for case counts."""
    register_profiles()
    settings.load_profile(hypothesis_profile())
    config.addinivalue_line("markers", f"{MARKER}(name): the check's gate tier, one of {', '.join(TIERS)}")
    config.stash[VERDICTS] = {}
    if not _is_worker(config):
        os.environ[_STATS_ENV] = tempfile.mkdtemp(prefix="lph-stats-")
    config.stash[STATS_DIR] = Path(os.environ[_STATS_ENV])
    config.pluginmanager.register(_VerdictCollector(config), "lph-verdicts")
    directory = _journal_dir(config)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        journal.clear(directory)  # this run's journal only: the gate gathers a rerun's passes itself


def pytest_unconfigure(config):
    if not _is_worker(config):
        os.environ.pop(_STATS_ENV, None)
        shutil.rmtree(config.stash[STATS_DIR], ignore_errors=True)


def pytest_collection_modifyitems(session, config, items):
    """Every check declares exactly one tier (harness.gate.tiers); it travels in the report's user properties.

    A check without a tier is a collection error naming it, never a check
    that silently weighs nothing.
    """
    problems = []
    for item in items:
        try:
            item.user_properties.append(("tier", tier_of_item(item)))
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise pytest.UsageError("\n".join(problems))
    items[:] = order_items(items)


def _journal_dir(config) -> Path | None:
    """Where the crash journal goes (``harness.gate.journal``): the report directory, in the process running checks.

    Under xdist a worker's death is xdist's to report: workers keep no journal.
    """
    report_dir = config.getoption("--report-dir")
    return Path(report_dir) if report_dir and not _is_worker(config) else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Journal the check before it runs: if the target kills the process inside it, the gate knows which."""
    directory = _journal_dir(item.config)
    if directory is not None:
        journal.started(directory, item.nodeid, dict(item.user_properties).get("tier", SELF_TEST))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Each test gets its own record and hang memo, current while it runs."""
    item.stash[RECORD] = record.TestRecord()
    item.stash[MEMO] = hang_memo.HangMemo()
    record.use(item.stash[RECORD])
    hang_memo.use(item.stash[MEMO])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Carry the facts of a failure or skip, the figures measured and the examples left out into the report.

    Facts are read from the exception object (``harness.checks.failure``),
    never from its message, and travel in the report's user properties
    (which cross xdist workers). A property whose every generated example
    needed a missing capability ends in Hypothesis' Unsatisfiable: that is
    reported as UNSUPPORTED, with the capabilities as facts.
    """
    report = yield
    if call.excinfo is not None and (report.failed or report.skipped):
        report.user_properties.append((FACTS, failure.facts_of(call.excinfo.value).to_dict()))
    observed = item.stash.get(RECORD, None)
    if call.when != "call" or observed is None:
        return report
    if observed.figures:
        report.user_properties.append(("figures", {name: dict(entry) for name, entry in observed.figures.items()}))
    if observed.passed_outputs:
        report.user_properties.append(("passed_outputs", sorted(observed.passed_outputs)))
    unsupported = observed.unsupported
    if not unsupported:
        return report
    name = next(iter(unsupported))[0]
    rejected = sum(unsupported.values())
    if report.failed and call.excinfo is not None and call.excinfo.errisinstance(Unsatisfiable):
        always = set.intersection(*(set(missing) for _, missing in unsupported))
        missing = sorted(always) or sorted({c for _, m in unsupported for c in m})
        report.outcome = "skipped"
        message = (
            f"UNSUPPORTED: target {name!r} does not support {missing} (all {rejected} generated examples needed it)"
        )
        report.longrepr = (str(item.path), 0, message)
        facts = failure.Facts(kind=failure.UNSUPPORTED, headline=message, missing=missing)
        report.user_properties[:] = [p for p in report.user_properties if p[0] != FACTS] + [(FACTS, facts.to_dict())]
        return report
    needed = Counter(c for (_, missing), count in unsupported.items() for c in missing for _ in range(count))
    detail = ", ".join(f"{c} ({n})" if n != rejected else c for c, n in needed.most_common())
    report.user_properties.append(("unsupported_examples", f"{rejected} generated examples needing {detail}"))
    return report


def _subtests(facts: failure.Facts, passed: list) -> dict:
    """The per-output verdict: the outputs some example passed, overridden by the ones the failure(s) failed."""
    outcomes = {output: {"outcome": PASS} for output in passed}
    outcomes.update({output: entry for output, entry in facts.subtests.items() if entry.get("outcome") == FAIL})
    for output, entry in facts.subtests.items():
        outcomes.setdefault(output, entry)
    return outcomes


def _raw_verdict(report, target: str) -> Verdict | None:
    """The verdict of a finished test (its call phase, or a setup phase that did not pass), from its facts."""
    if not (report.when == "call" or (report.when == "setup" and report.outcome != "passed")):
        return None
    properties = dict(report.user_properties)
    tier = properties.get("tier", SELF_TEST)
    figures = properties.get("figures", {})
    passed = properties.get("passed_outputs", [])
    facts = failure.Facts(**properties[FACTS]) if FACTS in properties else failure.Facts()
    if report.skipped:
        if facts.kind == failure.UNSUPPORTED:
            return Verdict(
                report.nodeid, UNSUPPORTED, tier, reason=facts.headline, missing=facts.missing, figures=figures
            )
        return Verdict(report.nodeid, SKIPPED, tier, reason=facts.headline, figures=figures)
    if report.failed:
        # a setup that raised ran no check (a target spec that names nothing): no verdict on the target's behaviour
        infrastructure = facts.kind in failure.UNDECIDED or report.when == "setup"
        if facts.kind == failure.PRECISION:  # rounding in the working dtype explains it: never a contract red
            tier = HARDENING
        return Verdict(
            report.nodeid,
            ERROR if infrastructure else FAIL,
            tier,
            reason=facts.headline,
            kind=facts.kind,
            check=facts.check,
            case=facts.case,
            options=facts.options,
            replay=facts.replay or f"{replay_environment()}python -m pytest '{report.nodeid}' --target {target}",
            figures={**facts.figures, **figures},
            diverged=facts.diverged,
            diagnosis=facts.diagnosis,
            warnings=facts.warnings,
            subtests={} if infrastructure else _subtests(facts, passed),
        )
    left_out = properties.get("unsupported_examples", "")
    return Verdict(
        report.nodeid,
        PASS,
        tier,
        reason=f"left out as UNSUPPORTED: {left_out}" if left_out else "",
        figures=figures,
        subtests=_subtests(failure.Facts(), passed),
    )


class _VerdictCollector:
    """Collects every test's verdict into the run's config stash (on the xdist controller too)."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        verdict = _raw_verdict(report, self.config.getoption("--target"))
        if verdict is not None:
            self.config.stash[VERDICTS][report.nodeid] = verdict
            directory = _journal_dir(self.config)
            if directory is not None:
                journal.decided(directory, verdict)


def pytest_sessionfinish(session, exitstatus):
    shutdown_all()
    if _is_worker(session.config) and stats.counts():
        stats.dump(session.config.stash[STATS_DIR])


def raw_rows(verdicts) -> list[Row]:
    """The run's raw verdicts as rows: a failing check one row per failing output (``harness/gate/units.py``),
    every other check one row (hangs say so; UNSUPPORTED rows carry their missing capabilities)."""
    rows = []
    for v in verdicts:
        failing = [unit for unit in units_of(v) if unit.outcome == FAIL] if v.outcome == FAIL else []
        for unit in failing or [whole(v)]:
            outcome = "FAIL (hang)" if unit.kind == HANG else unit.outcome
            reproduce = v.replay if v.outcome in (FAIL, ERROR) else ""
            summary = f" [diagnosis: {v.diagnosis_summary}]" if v.diagnosis_summary else ""
            detail = v.detail if unit.output == "" else unit.reason + summary
            rows.append(Row(v.id, unit.tier, outcome, detail, reproduce, tuple(v.missing), unit.kind, unit.output))
    return rows


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _is_worker(config):
        return
    counts = stats.load_all(config.stash[STATS_DIR]) + stats.counts()
    if counts:
        terminalreporter.section("generated cases run, by layout")
        for key, count in sorted(counts.items()):
            terminalreporter.write_line(f"{key}: {count}")
    verdicts = config.stash[VERDICTS]
    if not verdicts:
        return
    target = config.getoption("--target")
    rows = raw_rows(verdicts.values())
    terminalreporter.section(f"verdicts for target {target}")
    if case_limits.active():
        terminalreporter.write_line(f"generated cases limited by the target: {case_limits.describe()}")
    for line in render.terminal_lines(rows):
        terminalreporter.write_line(line)
    report_dir = config.getoption("--report-dir")
    if report_dir:
        path = Path(report_dir)
        layout = "\n".join(f"- {k}: {v}" for k, v in sorted(counts.items()))
        meta = {"profile": hypothesis_profile(), "layouts": dict(counts), "case_limits": case_limits.active()}
        Run(target=target, verdicts=dict(verdicts), meta=meta).save(path)
        body = render.markdown(rows, f"Verdicts for target `{target}`")
        (path / "report.md").write_text(f"{body}\n## Generated cases run, by layout\n\n{layout}\n")
        terminalreporter.write_line(f"report: {path / 'report.md'} (verdicts: {path / VERDICTS_FILE})")
