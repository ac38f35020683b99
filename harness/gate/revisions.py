"""The revisions a history replay compares, and its cache of their suite runs (``harness.gate.history``).

A revision is a commit of a family's git repository (``Revisions``) or a
published release (``ReleaseRevisions``). For each it extracts the tree,
loads the family there in one probe subprocess for many revisions (what the
loader executed becomes the key, or why it cannot load an ERROR row), keys it
by the content of the files the loaders executed (``content_key``), and runs
the suite on it once per key per harness revision and profile, cached on disk.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.gate import compare as comparison
from harness.gate import releases, specs
from harness.gate.runner import run_checked
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


def runs_of(cache: Path) -> Path:
    """Where this harness revision's runs of one profile are cached, one folder per content key."""
    return cache / "runs" / f"{HARNESS_REVISION}-{specs.hypothesis_profile()}"


def finished(out: Path) -> Run | None:
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
        out = runs_of(self.cache) / key
        cached = finished(out)
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


def release_commits(family: str, which: str, since: str) -> list[Commit]:
    """Consecutive published releases since ``since``, each the PR and the release before it its base."""
    pairs = releases.selected(family, which, since)
    return [Commit(v, date, f"{base} -> {v}", base, name=v) for (base, _), (v, date) in zip(pairs, pairs[1:])]
