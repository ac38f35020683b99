"""``python -m harness.gate SPEC [--baseline SPEC] [options] [pytest args]``: run the suite, decide.

One target (single mode): the suite runs once, each check is classified
against the target family's expectations, and the exit code is non-zero iff
an UNEXPECTED failure sits in a gated tier (``contract`` by default).

Base vs PR (``--baseline SPEC``): the suite runs on the base, then on the PR,
with the same derandomised examples (the ``ci`` Hypothesis profile unless one
is set); counterexamples are replayed across; every tier is gated by default.

Reports: ``reports/<slug>/`` per side (junit.xml, verdicts.json) and the
decision (report.md, gate.json, summary.md) in ``reports/<slug>/`` (single)
or ``reports/<pr>-vs-<base>/``. With ``$GITHUB_STEP_SUMMARY`` set, the
summary is appended to it.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.gate import base_cache, expectations, journal, retries, single, specs
from harness.gate import compare as comparison
from harness.gate.tiers import CHECK_DIRECTORIES, CONTRACT, TIERS, parse_tiers
from harness.gate.verdicts import Run
from harness.ranks.device import device_type

PYTEST_OK = (0, 1)  # all passed / some checks failed: both are verdicts; anything else is a broken run
PYTEST_NOTHING_LEFT = 5  # no test collected: after a crash, every check but the crashed ones had its verdict
MAX_CRASHES = 8  # checks that may kill the process in one run before the run is called broken


class RunError(RuntimeError):
    """pytest itself could not run the suite (usage error, collection error, internal error)."""


def _is_test_path(arg: str) -> bool:
    """A positional test selection (``regressions/test_x.py``, ``path::test``) replaces the whole suite."""
    return not arg.startswith("-") and (specs.ROOT / arg.split("::", 1)[0]).exists()


def _split_args(pytest_args: list[str]) -> tuple[list[str], list[str]]:
    """(test selections, other pytest options): a rerun keeps the options and names its own checks."""
    selected = [arg for arg in pytest_args if _is_test_path(arg)]
    return selected, [arg for arg in pytest_args if arg not in selected]


def run_suite(resolved: specs.ResolvedSpec, out: Path, pytest_args: list[str]) -> tuple[Run, float]:
    """The suite against one resolved SPEC, verdicts in ``out``; (run, wall seconds).

    A check inside which the target kills the process (``harness.gate.journal``) is a FAIL of kind ``crash``;
    the checks not yet run then run without it, and the verdicts of every pass are joined.
    """
    specs.install(resolved)
    out.mkdir(parents=True, exist_ok=True)
    stale = out / "verdicts.json"
    stale.unlink(missing_ok=True)
    selected, others = _split_args(pytest_args)
    command = [sys.executable, "-m", "pytest", *(selected or CHECK_DIRECTORIES), "--target", resolved.run_as]
    command += [f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", "-o", "junit_family=xunit2", *others]
    env = {**os.environ, **resolved.env}
    if "HYPOTHESIS_PROFILE" not in env and not env.get("CI"):
        env["HYPOTHESIS_PROFILE"] = "ci"  # the same derandomised examples on both sides of a comparison
    print(f"gate: running the suite against {resolved.spec} ({resolved.run_as}) -> {out}", flush=True)
    started = time.monotonic()
    code = subprocess.run(command, cwd=specs.ROOT, env=env).returncode
    crashed: dict = {}
    decided: dict = {}  # each pass's journal starts empty: the passes' verdicts are gathered here
    while code not in PYTEST_OK:
        passed_on, running = journal.read(out)
        decided.update(passed_on)
        if running is None or len(crashed) >= MAX_CRASHES:
            break
        nodeid, tier = running
        crashed[nodeid] = journal.crash_verdict(nodeid, tier, code, resolved.run_as, resolved.env)
        print(f"gate: {nodeid}: {crashed[nodeid].reason}; running the rest without it", flush=True)
        stale.unlink(missing_ok=True)
        done = [*decided, *crashed]
        code = subprocess.run([*command, *(f"--deselect={i}" for i in done)], cwd=specs.ROOT, env=env).returncode
        if code == PYTEST_NOTHING_LEFT:  # the crash was in the last check: every other one had been decided
            code = 0
    elapsed = time.monotonic() - started
    if code not in PYTEST_OK or not (stale.is_file() or crashed):
        raise RunError(f"pytest exited {code} on {resolved.spec} without verdicts: see its output above")
    if not crashed:
        return Run.load(out), elapsed
    last = Run.load(out) if stale.is_file() else Run(target=resolved.run_as)
    run = Run(target=last.target, verdicts={**decided, **last.verdicts, **crashed}, meta=last.meta)
    run.save(out)
    return run, elapsed


def run_checked(resolved: specs.ResolvedSpec, out: Path, pytest_args: list[str]) -> tuple[Run, float]:
    """``run_suite``, then the second chance of ``retries`` (ERROR rerun, hangs replayed); verdicts re-saved."""
    run, elapsed = run_suite(resolved, out, pytest_args)
    _, others = _split_args(pytest_args)
    rerun = retries.rerun_errors(run, lambda ids: run_suite(resolved, out / "retry", [*ids, *others])[0])
    unconfirmed = retries.confirm_hangs(run, resolved.target, resolved.env)
    for label, ids in (("rerun after an infrastructure ERROR", rerun), ("hang did not reproduce", unconfirmed)):
        if ids:
            print(f"gate: {label}: {', '.join(ids)}", flush=True)
    if rerun or unconfirmed:
        run.save(out)
    return run, elapsed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.gate", description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="the target (the PR): impl, skyrl==X, skyrl=PATH, slime=PATH, mod:attr, ...")
    parser.add_argument("--baseline", help="base SPEC: classify NEW FAIL / FIXED / STILL FAILING against it")
    parser.add_argument("--tiers", help=f"gated tiers (default: {CONTRACT} alone; with --baseline: all of {TIERS})")
    parser.add_argument(
        "--expectations", help="known failures files, comma-separated (default: the files the family's record names)"
    )
    parser.add_argument("--strict", action="store_true", help="FIXED (an expected failure now passing) is red too")
    parser.add_argument("--update-expectations", action="store_true", help="rewrite the expectations from this run")
    parser.add_argument("--reports", default="reports", help="report root (default: reports/)")
    parser.add_argument(
        "--base-cache",
        default=os.environ.get("LPH_BASE_CACHE"),
        help="with --baseline: reuse the base's verdicts cached here under what they depend on (gate/base_cache.py)",
    )
    return parser


def _step_summary(text: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")


def main(argv=None) -> int:
    args, pytest_args = _parser().parse_known_args(argv)
    try:
        head = specs.resolve(args.spec)
        base = specs.resolve(args.baseline) if args.baseline else None
        tiers = parse_tiers(args.tiers) if args.tiers else (TIERS if base else (CONTRACT,))
    except ValueError as exc:
        print(f"gate: {exc}", file=sys.stderr)
        return 2
    root = Path(args.reports)
    try:
        if base is None:
            return _single(head, root, tiers, args, pytest_args)
        return _compare(base, head, root, tiers, pytest_args, args.base_cache)
    except (RunError, FileNotFoundError, ValueError) as exc:
        print(f"gate: {exc}", file=sys.stderr)
        return 2


def _expectations_paths(head: specs.ResolvedSpec, args) -> tuple[Path, ...]:
    """``--expectations`` (comma-separated), else the files the family's record names."""
    if args.expectations:
        return tuple(Path(path) for path in args.expectations.split(","))
    return specs.expectation_files(head.family)


def _revision(resolved: specs.ResolvedSpec) -> expectations.Revision:
    """The release or checkout an expectation's conditions are evaluated on."""
    where = {}
    if resolved.pip_requirement:
        where = {"version": resolved.pip_requirement.partition("==")[2]}
    elif resolved.family and resolved.env:
        where = {"checkout": next(iter(resolved.env.values()))}
    return expectations.Revision(**where, device=device_type())


def _single(head: specs.ResolvedSpec, root: Path, tiers, args, pytest_args) -> int:
    paths = _expectations_paths(head, args)
    if args.update_expectations and len(paths) > 1:
        raise ValueError(
            f"--update-expectations rewrites one file: name it with --expectations (the family has {len(paths)})"
        )
    out = root / head.slug
    harness = specs.harness_revision()  # before the run: the code the verdicts came from
    run, elapsed = run_checked(head, out, pytest_args)
    path = paths[0] if paths else None
    written = {}
    for each in paths:
        written.update(expectations.load(each) if each.is_file() else {})
    expected, unevaluated = expectations.applicable(written, _revision(head))
    decision = single.classify(run, expected, tiers=tiers, strict=args.strict)
    decision.notes += unevaluated
    shown = ", ".join(str(p) for p in paths) if written else "none"
    decision.notes.append(f"expectations: {shown}; suite wall time {elapsed:.0f} s")
    decision.about = _about(head, run, elapsed, harness)
    if args.update_expectations:
        target_path = path or expectations.EXPECTATIONS_DIR / f"{head.family or head.slug}.toml"
        header = (
            expectations.header_of(target_path)
            if target_path.is_file()
            else (
                f"Known failures of {head.family or head.spec} at {head.slug}: one entry per check, each with a true\n"
                "one-line reason saying what is wrong upstream (docs/gate.md). Written by --update-expectations;\n"
                "entries marked TO EXPLAIN still need their reason written by a person."
            )
        )
        target_path.parent.mkdir(parents=True, exist_ok=True)
        target_path.write_text(expectations.render(run, written, header))
        print(f"gate: wrote {target_path}")
    return _finish(decision, out)


def _version(resolved: specs.ResolvedSpec) -> str:
    """A release's version, a checkout's short commit, else empty (impl, a path.py:Class adapter)."""
    if resolved.pip_requirement:
        return resolved.pip_requirement.partition("==")[2]
    if resolved.family and resolved.env:
        return specs.git_revision(Path(next(iter(resolved.env.values()))))
    return ""


def _about(resolved: specs.ResolvedSpec, run: Run, elapsed: float, harness: str) -> dict:
    """What a record says of this run (harness/records/store.py): which code, when, with which harness."""
    return {
        "spec": resolved.spec,
        "family": resolved.family or "",
        "slug": resolved.slug,
        "version": _version(resolved),
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "harness": harness,
        "profile": run.meta.get("profile", ""),
        "wall_s": round(elapsed),
    }


def _finish(decision, out: Path) -> int:
    """Both modes end alike: the reports written, the table printed, the step summary appended, the exit code."""
    decision.write(out)
    decision.print()
    _step_summary(decision.summary())
    print(f"gate: {out / 'report.md'}, {out / 'gate.json'}, {out / 'summary.md'}")
    return decision.exit_code


def _base_run(base: specs.ResolvedSpec, out: Path, pytest_args, cache: str | None) -> tuple[Run, float, str]:
    """The base's verdicts: from the cache when they were computed for the same suite, code and arguments."""
    key = base_cache.key(base, pytest_args) if cache else None
    cached = base_cache.load(Path(cache), key) if cache else None
    if cached is not None:
        cached.save(out)
        return cached, 0.0, f"base verdicts from the cache ({cache}, key {key})"
    run, elapsed = run_checked(base, out, pytest_args)
    if cache:
        base_cache.save(Path(cache), key, run)
    state = "cache miss, saved" if key else "not cacheable (an adapter outside this repository)"
    return run, elapsed, f"base verdicts: {state}" + (f" ({cache}, key {key})" if key else "")


def _compare(base: specs.ResolvedSpec, head: specs.ResolvedSpec, root: Path, tiers, pytest_args, cache=None) -> int:
    base_slug = base.slug if base.slug != head.slug else f"{base.slug}-base"
    started, harness = time.monotonic(), specs.harness_revision()
    base_run, base_s, cache_note = _base_run(base, root / base_slug, pytest_args, cache)
    head_run, head_s = run_checked(head, root / head.slug, pytest_args)
    replay_started = time.monotonic()
    decision = comparison.compare(
        base_run,
        head_run,
        comparison.Side(base.spec, base.target, base.env),
        comparison.Side(head.spec, head.target, head.env),
        tiers=tiers,
    )
    replay_s = time.monotonic() - replay_started
    total = time.monotonic() - started
    decision.notes.append(cache_note)
    decision.notes.append(
        f"wall time: base {base_s:.0f} s, PR {head_s:.0f} s, replays and classification {replay_s:.0f} s, "
        f"total {total:.0f} s"
    )
    decision.about = {**_about(head, head_run, total, harness), "baseline": base.spec}
    return _finish(decision, root / f"{head.slug}-vs-{base_slug}")
