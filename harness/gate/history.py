"""Would the gate have caught it? Base-vs-PR over an upstream repository's history.

``python -m harness.gate.history FAMILY=PATH_TO_GIT_REPO [--since 2025-12-01] [--until REV]
[--tags PATTERN] [--paths a.py,b.py] [--reports reports/history] [pytest args]``, FAMILY any checkout family of
``harness/gate/specs.py`` (slime, miles, verl, skyrl, nemo_rl, liger, trl, te, ms_swift); or
``FAMILY==pypi`` / ``FAMILY==V1,V2,...`` for a PyPI family: its published releases, each against the one
before it (``harness/gate/releases.py``)

For every commit (author date from ``--since``, up to ``--until``) that
touches the files holding the code under test, the commit is the PR and its
first parent the base. With ``--tags PATTERN`` (a ``git tag --list`` glob,
e.g. ``'v2.*'``) the releases are replayed instead: the tags matching it in
version order, each tag dated from ``--since`` the PR and the tag before it
the base. Revisions are keyed by the blob ids of those files, so
a revision whose files under test did not change reuses the verdicts of the
one that did: N commits cost N+1 suite runs, each cached on disk
(``<reports>/<family>/runs/<key>/verdicts.json``); a rerun only runs what is
missing. Trees are extracted with ``git archive`` into a temporary folder
(never into this repository). The table (commit, date, PR title, NEW FAIL,
FIXED) goes to ``history.md`` and ``history.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import names
from harness.gate import compare as comparison
from harness.gate import releases, specs
from harness.gate.runner import run_checked
from harness.gate.tiers import TIERS
from harness.gate.verdicts import Run

# Verdicts are valid for one revision of this harness: a changed suite reruns.
HARNESS_REVISION = specs.git_revision(specs.ROOT)


def _skyrl_files() -> tuple[str, ...]:
    from harness.targets.skyrl import policy, token

    return tuple(str(path) for path in (token.MODEL_UTILS, policy.PPO_UTILS, policy.WRAPPER))


# The files loaded by the adapters that do not name them themselves (their module docstrings); an adapter class
# with a ``files_under_test`` attribute (paths relative to the checkout root) names its own.
FILES_UNDER_TEST = {"skyrl": _skyrl_files}


def files_under_test(family: str) -> tuple[str, ...] | None:
    """The files ``family``'s adapter loads: its class's ``files_under_test``, else ``FILES_UNDER_TEST``."""
    adapter = names.resolve(specs.ADAPTERS[family])
    named = getattr(adapter, "files_under_test", None)
    if named:
        return tuple(named)
    return FILES_UNDER_TEST[family]() if family in FILES_UNDER_TEST else None


@dataclass
class Commit:
    sha: str
    date: str
    subject: str
    parent: str
    name: str = ""  # a release tag (``--tags``); the row shows it instead of the short sha


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def commits(repo: Path, paths, since: str, until: str) -> list[Commit]:
    """Commits touching ``paths`` with author date >= ``since``, oldest first."""
    log = _git(repo, "log", "--reverse", "--format=%H%x09%ad%x09%P%x09%s", "--date=short", until, "--", *paths)
    found = []
    for line in log.splitlines():
        sha, date, parents, subject = line.split("\t", 3)
        if date >= since and parents:
            found.append(Commit(sha, date, subject, parents.split()[0]))
    return found


def tagged(repo: Path, pattern: str, since: str) -> list[Commit]:
    """Consecutive release tags matching ``pattern`` (version order): each tag dated ``since`` or later is the PR,
    the tag before it (whatever its date) its base."""
    found, previous = [], None
    for name in _git(repo, "tag", "--list", pattern, "--sort=v:refname").split():
        sha = _git(repo, "rev-parse", f"{name}^{{commit}}").strip()
        date = _git(repo, "log", "-1", "--format=%ad", "--date=short", sha).strip()
        if previous is not None and date >= since:
            found.append(Commit(sha, date, f"{previous[0]} -> {name}", previous[1], name=name))
        previous = (name, sha)
    return found


def content_key(repo: Path, revision: str, paths) -> str:
    """Identity of the code under test at ``revision``: the blob ids of its files."""
    blobs = []
    for path in paths:
        try:
            blobs.append(_git(repo, "rev-parse", f"{revision}:{path}").strip())
        except subprocess.CalledProcessError:
            blobs.append("absent")
    return hashlib.sha1(" ".join(blobs).encode()).hexdigest()[:12]


class Revisions:
    """Extracted trees and cached verdicts, one per content key."""

    def __init__(self, family: str, repo: Path, cache: Path, trees: Path, pytest_args: list[str], paths=()):
        self.family, self.repo, self.cache, self.trees, self.pytest_args = family, repo, cache, trees, pytest_args
        self.paths = tuple(paths)
        self._load_errors: dict[str, str | None] = {}

    def key(self, revision: str) -> str:
        return content_key(self.repo, revision, self.paths)

    def tree(self, key: str, revision: str) -> Path:
        """The revision's tree; where the mirror lacks some blob (a partial clone), only the packages under test.

        Raises ``RuntimeError`` with git's message when neither can be extracted.
        """
        path = self.trees / key
        if not path.is_dir():
            archive = subprocess.run(["git", "-C", str(self.repo), "archive", revision], capture_output=True)
            if archive.returncode == 0:
                path.mkdir(parents=True)
                subprocess.run(["tar", "-x", "-C", str(path)], input=archive.stdout, check=True)
            else:
                self._packages_only(path, revision, archive.stderr.decode(errors="replace"))
        return path

    def _packages_only(self, path: Path, revision: str, why: str) -> None:
        """Write the files of the packages under test at ``revision`` blob by blob (git archive reads every blob).

        A non-Python blob the mirror lacks is left out; a missing Python file is an error.
        """
        packages = sorted({name.split("/")[0] for name in self.paths})
        listing = _git(self.repo, "ls-tree", "-r", revision, "--", *packages).splitlines()
        blobs = [line.split(None, 3) for line in listing if line.split(None, 3)[1] == "blob"]
        if not blobs:
            first = why.strip().splitlines()[0] if why.strip() else "no files"
            raise RuntimeError(f"git archive {revision[:9]} failed ({first}) and it has no {', '.join(packages)}")
        for _mode, _kind, blob, name in blobs:
            done = subprocess.run(["git", "-C", str(self.repo), "cat-file", "blob", blob], capture_output=True)
            if done.returncode != 0:
                if not name.endswith(".py"):
                    continue  # a data file the mirror left out (images, docs): no adapter executes it
                raise RuntimeError(f"{revision[:9]}:{name}: {done.stderr.decode(errors='replace').strip()}")
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(done.stdout)

    def side(self, key: str, revision: str) -> comparison.Side:
        variable = specs.CHECKOUT_VARIABLES[self.family]
        return comparison.Side(revision[:9], specs.ADAPTERS[self.family], {variable: str(self.tree(key, revision))})

    def load_error(self, key: str, revision: str) -> str | None:
        """Why the adapter cannot load this revision (its last error line), None where it loads.

        Checked in a subprocess with the revision's environment, once per key: a
        revision the adapter cannot load gets no verdict (its row is ERROR with
        this reason), never a FAIL of every check.
        """
        if key not in self._load_errors:
            try:
                side = self.side(key, revision)
            except RuntimeError as exc:
                self._load_errors[key] = str(exc)
                return self._load_errors[key]
            probe = "from harness.targets import load_target; load_target(__import__('sys').argv[1])"
            done = subprocess.run(
                [sys.executable, "-c", probe, side.target],
                cwd=specs.ROOT,
                env={**os.environ, **side.env},
                capture_output=True,
                text=True,
            )
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            self._load_errors[key] = (
                None if done.returncode == 0 else (lines[-1] if lines else f"exit {done.returncode}")
            )
        return self._load_errors[key]

    def run(self, key: str, revision: str) -> Run:
        out = self.cache / "runs" / HARNESS_REVISION / key
        if (out / "verdicts.json").is_file():
            return Run.load(out)
        side = self.side(key, revision)
        resolved = specs.ResolvedSpec(f"{self.family}@{revision[:9]}", side.target, key, self.family, side.env)
        run, elapsed = run_checked(resolved, out, self.pytest_args)
        run.meta.update({"revision": revision, "wall_s": round(elapsed, 1)})
        run.save(out)
        return run


class ReleaseRevisions(Revisions):
    """Published releases instead of commits: a revision is a version, its tree the release's install."""

    def key(self, revision: str) -> str:
        return releases.content_key(releases.install(self.family, revision), self.paths)

    def tree(self, key: str, revision: str) -> Path:
        return releases.install(self.family, revision)


def _release_commits(family: str, which: str, since: str) -> list[Commit]:
    pairs = releases.selected(family, which, since)
    return [Commit(v, date, f"{base} -> {v}", base, name=v) for (base, _), (v, date) in zip(pairs, pairs[1:])]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.gate.history", description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="FAMILY=PATH to a git repository (bare or not), e.g. slime=../slime")
    parser.add_argument("--since", default="2025-12-01", help="first author date (YYYY-MM-DD)")
    parser.add_argument("--until", default="HEAD", help="last revision (commits; not with --tags)")
    parser.add_argument("--tags", help="replay consecutive release tags matching this glob instead of commits")
    parser.add_argument("--paths", help="comma-separated files under test (default: the adapter's)")
    parser.add_argument("--reports", default="reports/history")
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
    paths = tuple(args.paths.split(",")) if args.paths else files_under_test(family)
    if not paths:
        print(f"history: give --paths for {family}", file=sys.stderr)
        return 2
    cache = Path(args.reports) / family
    table = []
    with tempfile.TemporaryDirectory(prefix="lph-history-") as trees:
        kind = ReleaseRevisions if published else Revisions
        revisions = kind(family, repo, cache, Path(trees), pytest_args, paths)
        if published:
            pending = _release_commits(family, location[1:], args.since)
        elif args.tags:
            pending = tagged(repo, args.tags, args.since)
        else:
            pending = commits(repo, paths, args.since, args.until)
        for commit in pending:
            head_key, base_key = revisions.key(commit.sha), revisions.key(commit.parent)
            if head_key == base_key:
                continue
            unloadable = [
                f"adapter cannot load {rev[:9]}: {reason}"
                for rev, key in ((commit.parent, base_key), (commit.sha, head_key))
                if (reason := revisions.load_error(key, rev))
            ]
            if unloadable:
                table.append(_row(commit, [], [], 0, unloadable, would_block=False))
                print(f"history: {commit.sha[:9]} ERROR: {'; '.join(unloadable)}", flush=True)
                _write(cache, family, args.since, table, total=len(pending))
                continue
            base_run, head_run = revisions.run(base_key, commit.parent), revisions.run(head_key, commit.sha)
            decision = comparison.compare(
                base_run,
                head_run,
                revisions.side(base_key, commit.parent),
                revisions.side(head_key, commit.sha),
                tiers=TIERS,
            )
            table.append(
                _row(
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
            _write(cache, family, args.since, table, total=len(pending))
    _write(cache, family, args.since, table, total=len(pending))
    print(f"history: {cache / 'history.md'}")
    return 0


def _row(commit: Commit, new_fail, fixed, still_failing: int, errors, *, would_block: bool) -> dict:
    return {
        "commit": commit.name or commit.sha[:9],
        "date": commit.date,
        "title": commit.subject,
        "new_fail": new_fail,
        "fixed": fixed,
        "still_failing": still_failing,
        "errors": errors,
        "would_block": would_block,
    }


def _write(cache: Path, family: str, since: str, table: list[dict], total: int) -> None:
    """The table so far (written after every commit, so a long replay can be read while it runs)."""
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "history.json").write_text(json.dumps(table, indent=1) + "\n")
    (cache / "history.md").write_text(render_table(family, since, table, total))


def _short(ids: list[str]) -> str:
    return "<br>".join(f"`{i.split('::', 1)[-1]}`".replace("|", "\\|") for i in ids) or "-"


def render_table(family: str, since: str, table: list[dict], total: int) -> str:
    blocked = sum(1 for row in table if row["would_block"])
    lines = [
        f"# Gate history: {family} since {since}",
        "",
        f"{len(table)} of {total} commits touching the code under test replayed; the gate would have blocked "
        f"{blocked}.",
        "",
        "| commit | date | PR title | NEW FAIL | FIXED | still failing | ERROR (undecided) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        title = row["title"].replace("|", "\\|")
        lines.append(
            f"| `{row['commit']}` | {row['date']} | {title} | {_short(row['new_fail'])} | {_short(row['fixed'])} "
            f"| {row['still_failing']} | {_short(row.get('errors', []))} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
