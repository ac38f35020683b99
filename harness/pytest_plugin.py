"""pytest wiring: the --target option, Hypothesis profiles, the verdict table and case counts.

Loaded from the root conftest.py. The verdict table (check, outcome, shrunk
counterexample, replay command) is printed at the end of every session and,
with ``--report-dir``, written as ``report.md`` next to pytest's JUnit XML.
A check skipped with an ``UNSUPPORTED:`` reason is reported as UNSUPPORTED,
never as a pass.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import Unsatisfiable

from harness import hang_memo, stats
from harness.checks import UNSUPPORTED_EXAMPLES
from harness.pool import shutdown_all

_BASE = settings(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
# dev: quick local feedback. ci: derandomised, no example database (reproducible CI).
# mutants: like ci but without shrinking (only the failure matters). thorough: >= 1000 random examples.
settings.register_profile("dev", _BASE, max_examples=15)
settings.register_profile("ci", _BASE, max_examples=80, derandomize=True, database=None)
settings.register_profile(
    "mutants", _BASE, max_examples=40, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate]
)
settings.register_profile("thorough", _BASE, max_examples=1000, phases=list(Phase))


def _profile() -> str:
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return os.environ["HYPOTHESIS_PROFILE"]
    return "ci" if os.environ.get("CI") else "dev"


settings.load_profile(_profile())


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
def target(request) -> str:
    """The target spec every property and regression checks."""
    return request.config.getoption("--target")


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


_STATS_ENV = "LPH_STATS_DIR"


def _stats_dir(config) -> Path:
    return Path(os.environ[_STATS_ENV])


def pytest_configure(config):
    """A fresh per-session directory for case counts; xdist workers inherit it through the environment."""
    config._lph_verdicts = {}
    if not _is_worker(config):
        os.environ[_STATS_ENV] = tempfile.mkdtemp(prefix="lph-stats-")


def pytest_unconfigure(config):
    if not _is_worker(config):
        shutil.rmtree(os.environ.pop(_STATS_ENV, ""), ignore_errors=True)


_REPLAY = re.compile(r"^(?:E\s+)?Replay: (.*)$", re.MULTILINE)
_CASE = re.compile(r"^(?:E\s+)?Case: (.*)$", re.MULTILINE)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    UNSUPPORTED_EXAMPLES.clear()
    hang_memo.reset()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Carry the count of examples rejected as UNSUPPORTED into the report (it crosses xdist workers).

    A property whose every generated example needed a missing capability
    ends in Hypothesis' Unsatisfiable: that is reported as UNSUPPORTED too.
    """
    report = yield
    if call.when != "call" or not UNSUPPORTED_EXAMPLES:
        return report
    name = next(iter(UNSUPPORTED_EXAMPLES))[0]
    rejected = sum(UNSUPPORTED_EXAMPLES.values())
    if report.failed and call.excinfo is not None and call.excinfo.errisinstance(Unsatisfiable):
        always = set.intersection(*(set(missing) for _, missing in UNSUPPORTED_EXAMPLES))
        missing = sorted(always) or sorted({c for _, m in UNSUPPORTED_EXAMPLES for c in m})
        report.outcome = "skipped"
        report.longrepr = (
            str(item.path),
            0,
            f"UNSUPPORTED: target {name!r} does not support {missing} (all {rejected} generated examples needed it)",
        )
        return report
    needed = Counter(c for (_, missing), count in UNSUPPORTED_EXAMPLES.items() for c in missing for _ in range(count))
    detail = ", ".join(f"{c} ({n})" if n != rejected else c for c, n in needed.most_common())
    report.user_properties.append(("unsupported_examples", f"{rejected} generated examples needing {detail}"))
    return report


def pytest_runtest_logreport(report):
    verdicts = _CONFIG[0]._lph_verdicts
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            outcome = "UNSUPPORTED" if "UNSUPPORTED" in reason else "SKIPPED"
            verdicts[report.nodeid] = (outcome, reason.replace("Skipped: ", ""), "")
        elif report.failed:
            text = report.longreprtext
            cases, replays = _CASE.findall(text), _REPLAY.findall(text)
            reason = _first_error_line(text)
            verdicts[report.nodeid] = (
                "FAIL",
                f"{reason} Case: {cases[-1]}" if cases else reason,
                replays[-1] if replays else f"pytest '{report.nodeid}'",
            )
        else:
            left_out = dict(report.user_properties).get("unsupported_examples", "")
            verdicts[report.nodeid] = ("PASS", f"left out as UNSUPPORTED: {left_out}" if left_out else "", "")


_CONFIG: list = []


_ERROR = re.compile(r"^(?:E\s+|\s*\|\s+)((?:\w+\.)*\w*(?:Error|Exception|Hang)\b.*|Failed: .*)$", re.MULTILINE)


def _first_error_line(text: str) -> str:
    """The first exception line (also inside Hypothesis' exception groups, whose lines start with '|')."""
    match = _ERROR.search(text)
    if match:
        return match.group(1).strip()[:240]
    lines = [line[2:] for line in text.splitlines() if line.startswith("E ")]
    return lines[0].strip()[:240] if lines else ""


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG[:] = [session.config]


def pytest_sessionfinish(session, exitstatus):
    shutdown_all()
    if _is_worker(session.config) and stats.counts():
        stats.dump(_stats_dir(session.config))


def verdict_table(verdicts: dict) -> str:
    rows = ["| check | outcome | counterexample | reproduce |", "|---|---|---|---|"]
    for nodeid, (outcome, detail, replay) in sorted(verdicts.items()):
        detail = detail.replace("|", "\\|")
        rows.append(
            f"| `{nodeid}` | {outcome} | {('`' + detail + '`') if detail else ''} | "
            f"{('`' + replay + '`') if replay else ''} |"
        )
    return "\n".join(rows)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _is_worker(config):
        return
    counts = stats.load_all(_stats_dir(config)) + stats.counts()
    if counts:
        terminalreporter.section("generated cases run, by layout")
        for key, count in sorted(counts.items()):
            terminalreporter.write_line(f"{key}: {count}")
    verdicts = config._lph_verdicts
    if not verdicts:
        return
    summary = {}
    for outcome, _, _ in verdicts.values():
        summary[outcome] = summary.get(outcome, 0) + 1
    target = config.getoption("--target")
    terminalreporter.section(f"verdicts for target {target}")
    for nodeid, (outcome, detail, replay) in sorted(verdicts.items()):
        terminalreporter.write_line(f"{outcome:11} {nodeid}")
        if detail:
            terminalreporter.write_line(f"{'':11} counterexample: {detail}")
        if replay:
            terminalreporter.write_line(f"{'':11} reproduce: {replay}")
    terminalreporter.write_line(", ".join(f"{n} {k}" for k, n in sorted(summary.items())))
    report_dir = config.getoption("--report-dir")
    if report_dir:
        path = Path(report_dir)
        path.mkdir(parents=True, exist_ok=True)
        layout = "\n".join(f"- {k}: {v}" for k, v in sorted(counts.items()))
        (path / "report.md").write_text(
            f"# Verdicts for target `{target}`\n\n{', '.join(f'{n} {k}' for k, n in sorted(summary.items()))}\n\n"
            f"{verdict_table(verdicts)}\n\n## Generated cases run, by layout\n\n{layout}\n"
        )
        terminalreporter.write_line(f"report: {path / 'report.md'}")
