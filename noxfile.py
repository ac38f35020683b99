"""Every entry point of the harness (README.md lists what each session does).

Virtualenvs are reused between runs; torch is pinned to the CPU wheel the
machines carry (2.13.0) so no session ever pulls a multi-GB CUDA build.
"""

from __future__ import annotations

import re
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

PYTHON = "3.11"
TORCH = "torch==2.13.0"
SUITE = ["properties", "regressions"]


def _install(session: nox.Session, extra: str = "test") -> None:
    session.install(TORCH)
    session.install("-e", f".[{extra}]")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The CI gate: harness self-tests, every property and regression against impl/, the mutant check."""
    _install(session)
    session.run("python", "-m", "pytest", "tests", *SUITE, *session.posargs)


def _target_slug(target: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", target).strip("_") or "target"


@nox.session(python=PYTHON)
def check(session: nox.Session) -> None:
    """Run properties + regressions against one target (--target T); verdict table, JUnit XML, report.md."""
    _install(session)
    args = list(session.posargs)
    target = "impl"
    if "--target" in args:
        target = args[args.index("--target") + 1]
    else:
        args += ["--target", target]
    out = f"reports/{_target_slug(target)}"
    session.run(
        "python",
        "-m",
        "pytest",
        *SUITE,
        f"--junitxml={out}/junit.xml",
        f"--report-dir={out}",
        "-o",
        "junit_family=xunit2",
        *args,
    )


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """Re-create each historic bug in impl/ and show its regression fails on it (killed/survived)."""
    _install(session)
    session.run("python", "-m", "harness.mutants", *session.posargs)


PEERS = ["skyrl==0.3.0"]


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """CPU speed (pytest-benchmark) and peak memory of impl/, donation, naive torch and installed peers.

    Writes reports/bench/speed.json, memory.json and memory.png. Peers are
    installed without their dependencies and loaded from the package at run
    time; one that cannot be installed is left out with a warning.
    """
    _install(session)
    session.install("matplotlib")
    for peer in PEERS:
        try:
            session.install("--no-deps", peer)
        except nox.command.CommandFailed:
            session.warn(f"peer {peer} could not be installed; benchmarking without it")
    raw = "reports/bench/raw-speed.json"
    Path(raw).parent.mkdir(parents=True, exist_ok=True)
    session.run("python", "-m", "pytest", "bench", f"--benchmark-json={raw}", *session.posargs)
    session.run("python", "-m", "bench.report", raw)
    session.run("python", "-m", "bench.memory_table")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
