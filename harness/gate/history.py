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
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.gate import compare as comparison
from harness.gate import releases, specs
from harness.gate.runner import run_checked
from harness.gate.tiers import CHECK_DIRECTORIES, TIERS
from harness.gate.verdicts import Run
from harness.targets import registry
from harness.targets.upstream.loader import keyed_in_part
from harness.targets.upstream.symbols import executed_digest

# Verdicts are valid for one revision of this harness: a changed suite reruns.
HARNESS_REVISION = specs.git_revision(specs.ROOT)
# One subprocess loads many revisions of a family (their modules live side by side) and says what each executed.
# Paths are made relative to the tree (the repository's root, which git keys by), not the family's root: a package
# kept under src/ (Liger) is src/... in git.
PROBE = """
import json, os, sys, traceback
from harness.targets import load_target, registry
family = sys.argv[1]
for tree in sys.argv[2:]:
    try:
        built = load_target(f"{family}={tree}")
        prefix = os.path.relpath(built.root, tree).replace(os.sep, "/")
        keyed = (lambda path: path) if prefix == "." else (lambda path: f"{prefix}/{path}")
        alone = {keyed(path): parts for path, parts in built.alone.items()}
        print(json.dumps({"tree": tree, "executed": [keyed(p) for p in built.executed], "alone": alone}), flush=True)
    except Exception as exc:
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        print(json.dumps({"tree": tree, "error": last}), flush=True)
"""


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


@dataclass
class Commit:
    sha: str
    date: str
    subject: str
    parent: str
    name: str = ""  # a release tag (``--tags``); the row shows it instead of the short sha

    @property
    def label(self) -> str:
        """The commit as its table row names it, and as ``--resume`` finds that row again."""
        return self.name or self.sha[:9]


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


def content_key(repo: Path, revision: str, paths, alone=None) -> str:
    """Identity of the code under test at ``revision``: the blob ids of its files; for a file only ever loaded in
    part (``alone``: file -> the definitions loaded), what loading those executes (``symbols.executed_digest``)."""
    alone, parts = alone or {}, []
    for path in paths:
        try:
            if path in alone:
                parts.append(executed_digest(_git(repo, "show", f"{revision}:{path}"), alone[path]))
            else:
                parts.append(_git(repo, "rev-parse", f"{revision}:{path}").strip())
        except subprocess.CalledProcessError:
            parts.append("absent")
    return hashlib.sha1(" ".join(parts).encode()).hexdigest()[:12]


def _runs(cache: Path) -> Path:
    """Where this harness revision's runs of one profile are cached, one folder per content key."""
    return cache / "runs" / f"{HARNESS_REVISION}-{specs.hypothesis_profile()}"


def _finished(out: Path) -> Run | None:
    """The run in ``out`` if the replay finished it (stamped with its revision after the checked run), else None.

    A replay stopped mid-suite still leaves pytest's verdicts of the checks
    run so far, unstamped: reused on ``--resume``, such a run read as the
    revision's (a stopped slime replay's 47 of 189 checks made two false
    rows, the revision's and the next commit's, which changed one unrelated
    file). It is run again.
    """
    if not (out / "verdicts.json").is_file():
        return None
    run = Run.load(out)
    return run if "revision" in run.meta else None


class Revisions:
    """Extracted trees, what each revision's loader executed, cached verdicts (one per content key)."""

    def __init__(self, family: str, repo: Path, cache: Path, trees: Path, pytest_args: list[str]):
        self.family, self.repo, self.cache, self.trees, self.pytest_args = family, repo, cache, trees, pytest_args
        self.paths: set[str] = set()  # the key: every file a probed revision executed
        self.alone: dict[str, tuple[str, ...]] = {}  # those no probed revision executed whole: their definitions
        self.probed: dict[str, dict] = {}  # revision -> {"executed": [...], "alone": {...}} or {"error": "..."}
        self._keys: dict[str, str] = {}  # revision -> key, for the key as it stands (a probe may widen it)

    def key(self, revision: str) -> str:
        """The revision's content key (git and a parse per key file, so each is computed once per key)."""
        if revision not in self._keys:
            self._keys[revision] = content_key(self.repo, revision, sorted(self.paths), self.alone)
        return self._keys[revision]

    def tree(self, revision: str) -> Path:
        """The revision's tree; where the mirror lacks some blob (a partial clone), the family's package only.

        Raises ``RuntimeError`` with git's message when neither can be extracted.
        """
        path = self.trees / revision
        if not path.is_dir():
            archive = subprocess.run(["git", "-C", str(self.repo), "archive", revision], capture_output=True)
            if archive.returncode == 0:
                path.mkdir(parents=True)
                subprocess.run(["tar", "-x", "-C", str(path)], input=archive.stdout, check=True)
            else:
                self._package_only(path, revision, archive.stderr.decode(errors="replace"))
        return path

    def _package_only(self, path: Path, revision: str, why: str) -> None:
        """Write the family package's files at ``revision`` blob by blob (git archive reads every blob).

        A non-Python blob the mirror lacks is left out; a missing Python file is an error.
        """
        locate = registry.family(self.family).locate
        package = locate.package
        listing = _git(self.repo, "ls-tree", "-r", revision, "--", *locate.package_dirs()).splitlines()
        blobs = [line.split(None, 3) for line in listing if line.split(None, 3)[1] == "blob"]
        if not blobs:
            first = why.strip().splitlines()[0] if why.strip() else "no files"
            raise RuntimeError(f"git archive {revision[:9]} failed ({first}) and it has no {package}")
        for _mode, _kind, blob, name in blobs:
            done = subprocess.run(["git", "-C", str(self.repo), "cat-file", "blob", blob], capture_output=True)
            if done.returncode != 0:
                if not name.endswith(".py"):
                    continue  # a data file the mirror left out (images, docs): no loader executes it
                raise RuntimeError(f"{revision[:9]}:{name}: {done.stderr.decode(errors='replace').strip()}")
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(done.stdout)

    def probe(self, revisions) -> None:
        """Load every revision not yet probed, in one subprocess; record what each executed, or why it cannot load."""
        trees = {}
        for revision in dict.fromkeys(revisions):
            if revision in self.probed:
                continue
            try:
                trees[str(self.tree(revision))] = revision
            except RuntimeError as exc:
                self.probed[revision] = {"error": str(exc)}
        if not trees:
            return
        done = subprocess.run(
            [sys.executable, "-c", PROBE, self.family, *trees], cwd=specs.ROOT, capture_output=True, text=True
        )
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                answer = json.loads(line)
                self.probed[trees.pop(answer["tree"])] = answer
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        for revision in trees.values():  # the probe died before answering for these
            self.probed[revision] = {"error": f"the load probe died: {last}"}
        loaded = [answer for answer in self.probed.values() if "executed" in answer]
        self.paths = {path for answer in loaded for path in answer["executed"]}
        self.alone = keyed_in_part((answer["executed"], answer.get("alone", {})) for answer in loaded)
        self._keys.clear()

    def load_error(self, revision: str) -> str | None:
        """Why the family cannot be loaded at this revision (its last error line), None where it loads."""
        self.probe([revision])
        return self.probed[revision].get("error")

    def side(self, revision: str) -> comparison.Side:
        variable = specs.CHECKOUT_VARIABLES[self.family]
        return comparison.Side(revision[:9], specs.ADAPTERS[self.family], {variable: str(self.tree(revision))})

    def run(self, key: str, revision: str) -> Run:
        out = _runs(self.cache) / key
        cached = _finished(out)
        if cached is not None:
            return cached
        side = self.side(revision)
        resolved = specs.ResolvedSpec(
            f"{self.family}@{revision[:9]}", side.target, key, self.family, side.env,
            run_as=f"{self.family}={self.tree(revision)}",
        )  # fmt: skip
        run, elapsed = run_checked(resolved, out, self.pytest_args)
        run.meta.update({"revision": revision, "wall_s": round(elapsed, 1)})
        run.save(out)
        return run


class ReleaseRevisions(Revisions):
    """Published releases instead of commits: a revision is a version, its tree the release's install."""

    def key(self, revision: str) -> str:
        try:
            return releases.content_key(releases.install(self.family, revision), sorted(self.paths), self.alone)
        except RuntimeError:  # pip could not install it: its own key, and load_error says why (an ERROR row)
            return f"uninstallable-{revision}"

    def tree(self, revision: str) -> Path:
        return releases.install(self.family, revision)


def _release_commits(family: str, which: str, since: str) -> list[Commit]:
    pairs = releases.selected(family, which, since)
    return [Commit(v, date, f"{base} -> {v}", base, name=v) for (base, _), (v, date) in zip(pairs, pairs[1:])]


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
    cached = _runs(revisions.cache)
    missing = [k for k in keys if _finished(cached / k) is None]
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
            pending = _release_commits(family, location[1:], args.since)
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
                continue
            unloadable = [
                f"adapter cannot load {rev[:9]}: {reason}"
                for rev in (commit.parent, commit.sha)
                if (reason := revisions.load_error(rev))
            ]
            if unloadable:
                table.append(_row(commit, [], [], 0, unloadable, would_block=False))
                print(f"history: {commit.sha[:9]} ERROR: {'; '.join(unloadable)}", flush=True)
                _write(cache, header, table)
                continue
            base_run, head_run = revisions.run(base_key, commit.parent), revisions.run(head_key, commit.sha)
            decision = comparison.compare(
                base_run, head_run, revisions.side(commit.parent), revisions.side(commit.sha), tiers=TIERS
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
            _write(cache, header, table)
        header.complete = True
    _write(cache, header, table)
    print(f"history: {cache / 'history.md'}")
    return 0


@dataclass
class History:
    """What a table is about: the family, the window, the key files, the selection."""

    family: str
    since: str
    total: int
    keyed_by: list[str]
    selection: str
    source: str = ""  # the repository's path, or "pypi" / the releases given
    until: str = "HEAD"
    alone: dict[str, list[str]] = field(default_factory=dict)  # key files keyed by these definitions only
    harness: str = HARNESS_REVISION
    profile: str = field(default_factory=specs.hypothesis_profile)  # examples per check: said in the table's header
    date: str = field(default_factory=lambda: datetime.datetime.now(datetime.UTC).date().isoformat())  # the run's day
    # How far the table reaches: the last commit it decided ("sha date"), and whether that was the window's last (a
    # replay stopped before its end leaves a table of its first commits, which a --resume continues).
    through: str = ""
    complete: bool = False
    releases: bool = False  # a PyPI family's published releases, not a checkout's commits (its record's own name)


def resumed(path: Path, family: str, described: str) -> dict[str, dict]:
    """The rows of an earlier table, by commit, to keep instead of running their commits again.

    A row is the comparison of two trees fixed by their commits, so it holds for as long as the harness revision,
    the Hypothesis profile and the selection that produced it do (a key widened since adds rows, it changes none).
    The run caches live in a temporary folder between sessions of a long replay; the table is what is committed
    (``docs/records/data/history/<family>.json``), so a replay pinned at the table's harness revision continues
    from it. A table from another harness, profile or selection is refused: its rows would mix two suites.
    """
    if not path.is_file():
        raise ValueError(f"{path} is not a file: give a history.json an earlier replay wrote")
    earlier = json.loads(path.read_text())
    about = earlier.get("about", {})
    now = asdict(History(family, "", 0, [], described))  # this replay's harness and profile, as its table records them
    for fact in ("family", "harness", "profile", "selection"):
        if about.get(fact) != now[fact]:
            raise ValueError(
                f"{path} was replayed with {fact} {about.get(fact)!r}, this replay has {now[fact]!r}; run from a "
                f"worktree pinned at its harness (git worktree add --detach DIR {about.get('harness')}) with its "
                "profile (HYPOTHESIS_PROFILE), or replay without --resume"
            )
    return {row["commit"]: row for row in earlier.get("rows", [])}


def _row(commit: Commit, new_fail, fixed, still_failing: int, errors, *, would_block: bool) -> dict:
    return {
        "commit": commit.label,
        "date": commit.date,
        "title": commit.subject,
        "new_fail": new_fail,
        "fixed": fixed,
        "still_failing": still_failing,
        "errors": errors,
        "would_block": would_block,
    }


def _write(cache: Path, header: History, table: list[dict]) -> None:
    """The table so far (written after every commit, so a long replay can be read while it runs)."""
    cache.mkdir(parents=True, exist_ok=True)
    body = {"about": asdict(header), "rows": table}
    (cache / "history.json").write_text(json.dumps(body, indent=1) + "\n")
    (cache / "history.md").write_text(render_table(header, table))


def keyed_by(paths, alone: dict) -> str:
    """The key's files, each loaded only in part followed by the definitions it is keyed by."""
    named = [f"`{p}`" + (f" (only {', '.join(f'`{d}`' for d in alone[p])})" if p in alone else "") for p in paths]
    return ", ".join(named) + "."


def _short(ids: list[str]) -> str:
    return "<br>".join(f"`{i.split('::', 1)[-1]}`".replace("|", "\\|") for i in ids) or "-"


def render_table(header: History, table: list[dict]) -> str:
    blocked = sum(1 for row in table if row["would_block"])
    reach = "" if header.complete else f" Not yet whole: replayed through {header.through or 'none'}."
    lines = [
        f"# Gate history: {header.family} since {header.since}",
        "",
        f"{len(table)} rows (the commits that changed the key, of {header.total} touching its files); the gate "
        f"would have blocked {blocked}.{reach}",
        "",
        f"Keyed by the {len(header.keyed_by)} files the loader executed: " + keyed_by(header.keyed_by, header.alone),
        "",
        f"Selection: {header.selection}.",
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
