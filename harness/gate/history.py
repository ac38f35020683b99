"""Would the gate have caught it? Base-vs-PR over an upstream repository's history.

``python -m harness.gate.history FAMILY=PATH_TO_GIT_REPO [--since 2025-12-01] [--until REV]
[--tags PATTERN] [--reports reports/history] [pytest args]``, FAMILY any family of the registry
(``harness/targets/registry.py``); or ``FAMILY==pypi`` / ``FAMILY==V1,V2,...`` for a PyPI family: its
published releases, each against the one before it (``harness/gate/releases.py``).

Keys from what ran. The files a family's revision is keyed by, and whose commits
are replayed, are the files its loader EXECUTED (``FamilyTarget.executed``:
every upstream module it ran, imports included), never a hand-written list:
the newest revision is loaded first, the commits touching what it executed
are listed, every one of them is loaded (one subprocess for all, which is also
how a revision that cannot be loaded becomes an ERROR row with its reason),
and the files any of them executed join the key until nothing new appears. A
module that moved between files, or a helper a loss module started to import,
is therefore in the key from the revision that executes it. A file no revision
executed whole, only some of its definitions loaded alone (``Loader.alone``: a
trainer method, a config class), is keyed by what loading those executes
(``symbols.executed_digest``), so commits elsewhere in it reuse the verdict.

The selection is the whole suite, less the deselections the family's record
writes down with their reason and measured cost; pytest arguments given here
replace it (the table says so).

For every commit (author date from ``--since``, up to ``--until``) that touches
the key, the commit is the PR and its first parent the base; with ``--tags
PATTERN`` (a ``git tag --list`` glob) the tags matching it in version order
instead, each the PR and the tag before it the base. Revisions whose key files
did not change reuse a verdict: N commits cost N+1 suite runs, each cached on
disk (``<reports>/<family>/runs/<harness>/<key>/verdicts.json``); a rerun only
runs what is missing. Trees are extracted with ``git archive`` into a
temporary folder (never into this repository). The table (commit, date, PR
title, NEW FAIL, FIXED) goes to ``history.md``, and with what it is about (the
window, the key, the selection, the harness revision, the day) to
``history.json``, which ``nox -s docs`` turns into the family's record.

The revisions, their keys and the run cache are ``harness/gate/revisions.py``;
the table, its header and ``--resume`` are ``harness/gate/history_table.py``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

from harness.gate import compare as comparison
from harness.gate import specs
from harness.gate.history_table import History, resumed, table_row, write
from harness.gate.revisions import (
    HARNESS_REVISION,
    Commit,
    ReleaseRevisions,
    Revisions,
    commits,
    finished,
    release_commits,
    runs_of,
    tagged,
)
from harness.gate.tiers import CHECK_DIRECTORIES, TIERS
from harness.targets import registry


def selection(family: str, pytest_args: list[str]) -> tuple[list[str], str]:
    """The pytest arguments a replay runs, and how the table describes them (see the module docstring)."""
    if pytest_args:
        return pytest_args, f"given by hand: `{' '.join(pytest_args)}`"
    deselect = registry.family(family).deselect
    if not deselect:
        return list(CHECK_DIRECTORIES), "the whole suite"
    keyword = " or ".join(f"({d.keyword})" for d in deselect)
    why = "; ".join(f"`{d.keyword}`: {d.reason} ({d.cost})" for d in deselect)
    return [*CHECK_DIRECTORIES, "-k", f"not ({keyword})"], f"the whole suite less the record's deselections: {why}"


def discover(revisions: Revisions, newest: str, listing) -> list[Commit]:
    """The commits to replay: ``listing(paths)`` until every listed revision's executed files are in the key.

    Where the newest revision cannot be loaded, every commit is listed and probed until some revision loads. If
    none does there is no key (every revision's would be equal: a table of nothing), so that is the replay's
    error, naming the newest revision's reason, never an empty table.
    """
    revisions.probe([newest])
    while True:
        known = set(revisions.paths)
        pending = listing(sorted(known))
        revisions.probe([revision for commit in pending for revision in (commit.parent, commit.sha)])
        if revisions.paths == known:
            if not known:
                why = revisions.probed[newest].get("error", "it executed no upstream file")
                raise RuntimeError(f"no revision could be loaded, so nothing keys the replay; {newest}: {why}")
            return pending


def plan(revisions: Revisions, pending: list[Commit]) -> str:
    """What a replay would cost: the commits listed, those whose key changes (a row each), and the suite runs
    they need that the cache does not hold (loadable revisions only; an unloadable one is an ERROR row)."""
    changed = [c for c in pending if revisions.key(c.sha) != revisions.key(c.parent)]
    keys = {revisions.key(r): r for c in changed for r in (c.parent, c.sha) if not revisions.load_error(r)}
    cached = runs_of(revisions.cache)
    missing = [k for k in keys if finished(cached / k) is None]
    return (
        f"history plan: {len(pending)} commits touch the key, {len(changed)} change it; {len(keys)} suite runs, "
        f"{len(missing)} not cached (harness {HARNESS_REVISION}, profile {specs.hypothesis_profile()})"
    )


def _exit_on_terminate() -> None:
    """SIGTERM (a ``kill``, a CI timeout) exits through Python, as Ctrl-C does, so the extracted trees go with it.

    A replay's temporary folder holds a tree per revision pair, gigabytes for verl; killed the default way, it
    is left in /tmp, and a few stopped replays fill the disk until the next one cannot extract a tree.
    """
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.gate.history", description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="FAMILY=PATH to a git repository (bare or not), e.g. slime=../slime")
    parser.add_argument("--since", default="2025-12-01", help="first author date (YYYY-MM-DD)")
    parser.add_argument("--until", default="HEAD", help="last revision (commits; not with --tags)")
    parser.add_argument("--tags", help="replay consecutive release tags matching this glob instead of commits")
    parser.add_argument("--reports", default="reports/history")
    parser.add_argument("--plan", action="store_true", help="count the suite runs the replay needs; run none")
    parser.add_argument(
        "--resume",
        type=Path,
        help="an earlier table of this replay (its history.json, e.g. the family's record): its rows are kept, "
        "only the commits it lacks are run; it must name this harness revision, profile and selection",
    )
    args, pytest_args = parser.parse_known_args(argv)
    family, _, location = args.spec.partition("=")
    published = location.startswith("=")
    if family not in specs.CHECKOUT_VARIABLES or not location or (published and family not in specs.PYPI):
        print(
            f"history: SPEC must be FAMILY=PATH with FAMILY in {sorted(specs.CHECKOUT_VARIABLES)}, or "
            f"FAMILY==pypi / FAMILY==V1,V2,... with FAMILY in {sorted(specs.PYPI)}",
            file=sys.stderr,
        )
        return 2
    repo = None if published else Path(location).expanduser().resolve()
    cache = Path(args.reports) / family
    chosen, described = selection(family, pytest_args)
    try:  # before any revision is loaded: a table that cannot be continued is refused at once
        kept = resumed(args.resume, family, described) if args.resume else {}
    except ValueError as exc:
        print(f"history: --resume: {exc}", file=sys.stderr)
        return 2
    table: list[dict] = []
    _exit_on_terminate()
    with tempfile.TemporaryDirectory(prefix="lph-history-") as trees:
        kind = ReleaseRevisions if published else Revisions
        revisions = kind(family, repo, cache, Path(trees), chosen)
        if published:
            pending = release_commits(family, location[1:], args.since)
            revisions.probe([revision for commit in pending for revision in (commit.parent, commit.sha)])
        elif args.tags:
            pending = tagged(repo, args.tags, args.since)
            revisions.probe([revision for commit in pending for revision in (commit.parent, commit.sha)])
        else:
            try:
                pending = discover(revisions, args.until, lambda paths: commits(repo, paths, args.since, args.until))
            except RuntimeError as exc:
                print(f"history: ERROR: {exc}", file=sys.stderr)
                return 3  # undecided, as a gate that cannot load the code (docs/gate.md)
        source = location if not published else location[1:]
        alone = {path: list(selectors) for path, selectors in revisions.alone.items()}
        header = History(
            family,
            args.since,
            len(pending),
            sorted(revisions.paths),
            described,
            source,
            args.until,
            alone=alone,
            releases=published,
        )
        if args.plan:
            print(plan(revisions, pending), flush=True)
            return 0
        for commit in pending:
            head_key, base_key = revisions.key(commit.sha), revisions.key(commit.parent)
            if head_key == base_key:
                continue
            header.through = f"{commit.label} {commit.date}"
            if (row := kept.get(commit.label)) is not None:
                table.append(row)
                write(cache, header, table)  # a replay stopped before its next new row still holds the kept ones
                continue
            unloadable = [
                f"adapter cannot load {rev[:9]}: {reason}"
                for rev in (commit.parent, commit.sha)
                if (reason := revisions.load_error(rev))
            ]
            if unloadable:
                table.append(table_row(commit, [], [], 0, unloadable, would_block=False))
                print(f"history: {commit.sha[:9]} ERROR: {'; '.join(unloadable)}", flush=True)
                write(cache, header, table)
                continue
            base_run, head_run = revisions.run(base_key, commit.parent), revisions.run(head_key, commit.sha)
            decision = comparison.compare(
                base_run, head_run, revisions.side(commit.parent), revisions.side(commit.sha), tiers=TIERS
            )
            table.append(
                table_row(
                    commit,
                    [f"{e.name} [{e.tier}]" for e in decision.new_failures],
                    [f"{e.name} [{e.tier}]" for e in decision.fixed],
                    len(decision.still_failing),
                    [f"{e.name} [{e.tier}]" for e in decision.errors],
                    would_block=decision.exit_code == 1,
                )
            )
            print(
                f"history: {commit.sha[:9]} {commit.subject[:60]}: {len(decision.new_failures)} new, "
                f"{len(decision.fixed)} fixed",
                flush=True,
            )
            write(cache, header, table)
        header.complete = True
    write(cache, header, table)
    print(f"history: {cache / 'history.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
