"""The history replay (harness/gate/history.py) for any family, on throwaway git repositories: offline, fast.

A tiny repository holding the verl stand-in tree is committed three times
(the correct tree, a revision that touches no file the loader executed, a
revision whose ``tensor_parallel.py`` lacks what verl's engine imports from
it). The replay must pick only the commits touching the executed files, key
revisions by those files' blobs, and give the unloadable revision an ERROR row
with the reason, never a verdict (the suite is not run for it).

A slime stand-in repository shows the keys coming from what the loader
executed: a defect in a helper module the loss module imports (no list names
it) is replayed and seen, and a revision without the loss module is an ERROR
row naming the file.
"""

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.checks.parity import check_packed_forward
from harness.gate import history
from harness.gate import revisions as revisions_module
from harness.gate.verdicts import FAIL, PASS, Run, Verdict
from tests.fakes.slime import targets as slime_fakes
from tests.fakes.verl import targets as fakes

TENSOR_PARALLEL = "verl/utils/megatron/tensor_parallel.py"
MISSING = "cannot import name 'vocab_parallel_entropy'"  # verl's engine imports it from tensor_parallel.py


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def _two_commits(root):
    """The tree as its first commit, then a commit touching no file under test."""
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "correct tree", "--date=2026-01-01T00:00:00")
    (root / "README.md").write_text("no file under test\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "docs only", "--date=2026-01-02T00:00:00")


@pytest.fixture()
def repo(tmp_path):
    root = tmp_path / "verl"
    shutil.copytree(fakes.HERE / "correct", root)
    _two_commits(root)
    (root / TENSOR_PARALLEL).write_text("def vocab_parallel_log_probs_from_logits(logits, labels):\n    return None\n")
    _git(root, "commit", "-qam", "drop the entropy", "--date=2026-01-03T00:00:00")
    return root


def test_only_commits_touching_the_executed_files_are_replayed(repo):
    paths = fakes.correct().executed
    found = revisions_module.commits(repo, paths, "2025-01-01", "HEAD")
    assert [c.subject for c in found] == ["drop the entropy"]  # the first commit has no parent to compare with
    assert revisions_module.content_key(repo, "HEAD~1", paths) == revisions_module.content_key(repo, "HEAD~2", paths)
    assert revisions_module.content_key(repo, "HEAD", paths) != revisions_module.content_key(repo, "HEAD~1", paths)


def test_a_revision_the_adapter_cannot_load_is_an_error_row_with_its_reason(repo, tmp_path, monkeypatch):
    def no_suite(*args, **kwargs):
        raise AssertionError("the suite must not run for a revision the adapter cannot load")

    monkeypatch.setattr(revisions_module, "run_checked", no_suite)
    reports = tmp_path / "reports"
    assert history.main([f"verl={repo}", "--since", "2025-01-01", "--reports", str(reports)]) == 0
    (row,) = json.loads((reports / "verl" / "history.json").read_text())["rows"]
    assert row["title"] == "drop the entropy" and not row["would_block"] and not row["new_fail"]
    (error,) = row["errors"]
    assert error.startswith("adapter cannot load") and MISSING in error
    assert "adapter cannot load" in (reports / "verl" / "history.md").read_text()


def test_a_replay_resumed_from_its_table_keeps_its_rows_and_refuses_another_harness(
    repo, tmp_path, capsys, monkeypatch
):
    """A long replay outlives its run cache (a temporary folder): ``--resume`` continues from the committed table.
    Its rows stand in for their commits (none is loaded or run again); a table from another harness revision is
    refused with the fix, before any revision is loaded, since its rows would mix two suites."""
    reports = tmp_path / "reports"
    assert history.main([f"verl={repo}", "--since", "2025-01-01", "--reports", str(reports)]) == 0
    table = reports / "verl" / "history.json"
    body = json.loads(table.read_text())
    body["rows"][0]["title"] = "kept from the earlier table"
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(body))
    again = tmp_path / "again"
    resume = [f"verl={repo}", "--since", "2025-01-01", "--reports", str(again), "--resume", str(earlier)]
    assert history.main(resume) == 0
    (row,) = json.loads((again / "verl" / "history.json").read_text())["rows"]
    assert row["title"] == "kept from the earlier table"
    body["about"]["harness"] = "0123abcde"
    earlier.write_text(json.dumps(body))

    def no_probe(*args, **kwargs):
        raise AssertionError("a table that cannot be continued is refused before any revision is loaded")

    monkeypatch.setattr(revisions_module.Revisions, "probe", no_probe)
    assert history.main(resume) == 2
    said = capsys.readouterr().err
    assert "--resume" in said and "harness '0123abcde'" in said and "git worktree add --detach DIR 0123abcde" in said


def test_a_resumed_replay_writes_its_kept_rows_before_it_decides_a_new_one(repo, tmp_path, monkeypatch):
    """A long replay is stopped between rows (a session ends): the table it leaves must hold every row it kept from
    ``--resume``, not only those up to the last row it decided itself, or copying it back would lose rows."""
    (repo / TENSOR_PARALLEL).write_text((fakes.HERE / "correct" / TENSOR_PARALLEL).read_text())
    _git(repo, "commit", "-qam", "restore the entropy", "--date=2026-01-04T00:00:00")
    monkeypatch.setattr(revisions_module, "run_checked", lambda *a, **k: pytest.fail("no suite: both rows are ERROR"))
    reports = tmp_path / "reports"
    assert history.main([f"verl={repo}", "--since", "2025-01-01", "--reports", str(reports)]) == 0
    body = json.loads((reports / "verl" / "history.json").read_text())
    assert [row["title"] for row in body["rows"]] == ["drop the entropy", "restore the entropy"]
    body["rows"] = body["rows"][:1]
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps(body))
    again = tmp_path / "again" / "verl" / "history.json"
    seen = []
    load_error = revisions_module.Revisions.load_error

    def snapshot(self, rev):  # the moment the replay turns to the row it decides itself
        seen.append([row["title"] for row in json.loads(again.read_text())["rows"]] if again.is_file() else None)
        return load_error(self, rev)

    monkeypatch.setattr(revisions_module.Revisions, "load_error", snapshot)
    resume = [f"verl={repo}", "--since", "2025-01-01", "--reports", str(again.parent.parent), "--resume", str(earlier)]
    assert history.main(resume) == 0
    assert seen and seen[0] == ["drop the entropy"]


def test_tags_replay_consecutive_releases_in_version_order(repo, tmp_path, monkeypatch):
    """``--tags``: each release against the release before it (v0.10 after v0.2, not before), the PR's row named by
    its tag; a release whose files under test did not change costs nothing, an unloadable one is ERROR."""
    _git(repo, "tag", "v0.1", "HEAD~2")
    _git(repo, "tag", "v0.2", "HEAD~1")
    _git(repo, "tag", "v0.10", "HEAD")
    _git(repo, "tag", "other", "HEAD")
    found = revisions_module.tagged(repo, "v*", "2025-01-01")
    assert [(c.name, c.subject) for c in found] == [("v0.2", "v0.1 -> v0.2"), ("v0.10", "v0.2 -> v0.10")]
    assert found[1].parent == found[0].sha
    assert [c.name for c in revisions_module.tagged(repo, "v*", "2026-01-03")] == ["v0.10"]  # its base may be older

    def no_suite(*args, **kwargs):
        raise AssertionError("the suite must not run for a revision the adapter cannot load")

    monkeypatch.setattr(revisions_module, "run_checked", no_suite)
    reports = tmp_path / "reports"
    assert history.main([f"verl={repo}", "--tags", "v*", "--since", "2025-01-01", "--reports", str(reports)]) == 0
    (row,) = json.loads((reports / "verl" / "history.json").read_text())["rows"]
    assert (row["commit"], row["title"]) == ("v0.10", "v0.2 -> v0.10")
    assert row["errors"] and row["errors"][0].startswith("adapter cannot load")


def test_pypi_releases_replay_each_release_against_the_one_before(tmp_path, monkeypatch):
    """``verl==pypi``: final releases in version order (1.10 after 1.9, pre-releases and yanked ones left out), the
    first one from ``--since`` compared with the release before it; a release whose files under test did not
    change costs nothing, an unloadable one is an ERROR row (no network: PyPI's answer and the installs are faked)."""
    from harness.gate import releases

    def upload(date, yanked=False):
        return [{"upload_time": f"{date}T00:00:00", "yanked": yanked}]

    answer = {
        "releases": {
            "1.9": upload("2025-01-01"),
            "1.10": upload("2026-02-01"),
            "1.11rc1": upload("2026-02-02"),
            "1.8": upload("2024-12-01"),
            "1.12": upload("2026-03-01", yanked=True),
            "1.11": upload("2026-03-02"),
            "1.7": [],
        }
    }
    monkeypatch.setattr(releases, "_fetch_json", lambda name: answer)
    assert releases.published("verl") == [
        ("1.8", "2024-12-01"),
        ("1.9", "2025-01-01"),
        ("1.10", "2026-02-01"),
        ("1.11", "2026-03-02"),
    ]
    assert [v for v, _ in releases.selected("verl", "pypi", "2026-01-01")] == ["1.9", "1.10", "1.11"]
    assert releases.selected("verl", "1.8,1.11", "2026-01-01") == [("1.8", "2024-12-01"), ("1.11", "2026-03-02")]
    with pytest.raises(ValueError, match="at least two versions"):
        releases.selected("verl", "1.8", "2026-01-01")

    trees = {}
    for version, broken in (("1.9", False), ("1.10", False), ("1.11", True)):
        trees[version] = tmp_path / version
        shutil.copytree(fakes.HERE / "correct", trees[version])
        if broken:
            (trees[version] / TENSOR_PARALLEL).write_text(
                "def vocab_parallel_log_probs_from_logits(x, y):\n    return x\n"
            )
    monkeypatch.setattr(releases, "install", lambda family, version: trees[version])

    def no_suite(*args, **kwargs):
        raise AssertionError("the suite must not run for a revision the adapter cannot load")

    monkeypatch.setattr(revisions_module, "run_checked", no_suite)
    reports = tmp_path / "reports"
    assert history.main(["verl==pypi", "--since", "2026-01-01", "--reports", str(reports)]) == 0
    (row,) = json.loads((reports / "verl" / "history.json").read_text())["rows"]
    assert (row["commit"], row["title"], row["date"]) == ("1.11", "1.10 -> 1.11", "2026-03-02")
    assert row["errors"][0].startswith("adapter cannot load") and MISSING in row["errors"][0]
    assert history.main(["slime==pypi", "--reports", str(reports)]) == 2  # slime publishes no releases here


# ---- keys from what the loader executed (a slime stand-in repository) -------------------------------

LOSS = "slime/backends/megatron_utils/loss.py"
HELPER = "slime/utils/scaling.py"
CASE_ID = "properties/test_forward_parity.py::test_packed_forward_parity"


@pytest.fixture()
def slime_repo(tmp_path):
    """fused stand-in whose loss module divides by the temperature through a helper no list names; then a
    docs-only commit, a defect in the helper, and a revision without the loss module."""
    from harness.cases.case import Case

    root = tmp_path / "slime"
    shutil.copytree(slime_fakes.HERE / "fused", root)
    (root / HELPER).write_text("def scaled(logits, temperature):\n    return logits / temperature\n")
    loss = root / LOSS
    text = loss.read_text()
    assert "logits = logits / args.rollout_temperature" in text
    text = text.replace(
        "logits = logits / args.rollout_temperature", "logits = scaled(logits, args.rollout_temperature)"
    )
    loss.write_text("from slime.utils.scaling import scaled\n" + text)
    _two_commits(root)
    (root / HELPER).write_text("def scaled(logits, temperature):\n    return logits * temperature\n")
    _git(root, "commit", "-qam", "scale the other way", "--date=2026-01-03T00:00:00")
    (root / LOSS).unlink()
    _git(root, "commit", "-qam", "move the loss module away", "--date=2026-01-04T00:00:00")
    case = Case(seed=5, vocab=12, samples=((7, 4), (5, 3)), temperature=0.7)
    return root, case


def _one_check_runner(case):
    """A suite of one check, run in this process on the revision's tree (the real runner runs pytest)."""

    def run_checked(resolved, out, pytest_args):
        try:
            check_packed_forward(case, resolved.run_as)
            verdict = Verdict(CASE_ID, PASS, "contract")
        except AssertionError as exc:
            verdict = Verdict(CASE_ID, FAIL, "contract", reason=str(exc).splitlines()[0], kind="value")
        return Run(target=resolved.run_as, verdicts={CASE_ID: verdict}), 0.0

    return run_checked


def test_the_key_is_what_the_loader_executed_and_a_defect_there_is_seen(slime_repo, tmp_path, monkeypatch):
    root, case = slime_repo
    monkeypatch.setattr(revisions_module, "run_checked", _one_check_runner(case))
    reports = tmp_path / "reports"
    assert history.main([f"slime={root}", "--since", "2025-01-01", "--reports", str(reports)]) == 0
    rows = json.loads((reports / "slime" / "history.json").read_text())["rows"]
    assert [row["title"] for row in rows] == ["scale the other way", "move the loss module away"]
    defect, moved = rows
    # The helper is in the key because the loss module imported it: its commit is replayed and blocked.
    assert defect["new_fail"] == [f"{CASE_ID} [contract]"] and defect["would_block"]
    # A revision without the file the record names is an ERROR row naming it, never UNSUPPORTED.
    assert not moved["new_fail"] and not moved["would_block"]
    (error,) = moved["errors"]
    assert error.startswith("adapter cannot load") and "slime/backends/megatron_utils/loss.py" in error
    table = (reports / "slime" / "history.md").read_text()
    assert HELPER in table and "Selection: the whole suite" in table


def test_discovery_adds_what_older_revisions_executed(slime_repo):
    """A file only an older revision executes (the newest no longer has it) joins the key."""
    root, _ = slime_repo
    revisions = revisions_module.Revisions("slime", root, root / "cache", root.parent / "trees", [])
    pending = history.discover(
        revisions, "HEAD", lambda paths: revisions_module.commits(root, paths, "2025-01-01", "HEAD")
    )
    assert {HELPER, LOSS} <= revisions.paths
    assert "error" in revisions.probed[pending[-1].sha] and "executed" in revisions.probed[pending[-1].parent]


def test_a_family_deselection_is_written_with_its_reason_and_cost():
    chosen, described = history.selection("slime", [])
    assert chosen == list(history.CHECK_DIRECTORIES) and described == "the whole suite"
    given, described = history.selection("slime", ["regressions"])
    assert given == ["regressions"] and "by hand" in described


# ---- a file only ever loaded in part is keyed by what loading that part executes -----------------------

ENGINE = "verl/workers/engine/megatron/transformer_impl.py"


def test_a_file_loaded_in_part_is_keyed_by_the_part_so_a_commit_elsewhere_in_it_costs_no_replay(tmp_path):
    """verl's engine module is loaded a method at a time: a commit adding another method to it touches a key
    file (it is listed) but leaves the key as it was (no suite run, no row); one changing a module-level name the
    method reads changes it."""
    root = tmp_path / "verl"
    shutil.copytree(fakes.HERE / "correct", root)
    _two_commits(root)
    engine = root / ENGINE
    engine.write_text(engine.read_text() + "\n    def unrelated(self):\n        return None\n")
    _git(root, "commit", "-qam", "another engine method", "--date=2026-01-03T00:00:00")
    engine.write_text(engine.read_text().replace("DIVIDE = True", "DIVIDE = False"))
    _git(root, "commit", "-qam", "leave out the temperature", "--date=2026-01-04T00:00:00")
    revisions = revisions_module.Revisions("verl", root, root / "cache", tmp_path / "trees", [])
    pending = history.discover(
        revisions, "HEAD", lambda paths: revisions_module.commits(root, paths, "2025-01-01", "HEAD")
    )
    # Keyed by the engine's definitions loaded alone, and forward_step, read for the processor's arguments it
    # builds (a file some revision executed whole would not be here).
    assert revisions.alone[ENGINE] == (
        "MegatronEngineWithLMHead._lm_head_logits_processor",
        "MegatronEngineWithLMHead.forward_step",
        "MegatronEngineWithLMHead.forward_step.logits_processor",
    )
    assert [c.subject for c in pending] == ["another engine method", "leave out the temperature"]
    elsewhere, step = pending
    assert revisions.key(elsewhere.sha) == revisions.key(elsewhere.parent)
    assert revisions.key(step.sha) != revisions.key(step.parent)
    assert history.plan(revisions, pending).startswith(
        "history plan: 2 commits touch the key, 1 change it; 2 suite runs, 2 not cached"
    )
    # Keyed by the whole file (as before), both commits would have cost a replay.
    whole = sorted(revisions.paths)
    assert revisions_module.content_key(root, elsewhere.sha, whole) != revisions_module.content_key(
        root, elsewhere.parent, whole
    )


def test_a_package_under_src_is_keyed_by_its_repository_paths(tmp_path):
    """Liger keeps its package under src/: the key must be the paths git knows (src/liger_kernel/...), or every
    revision's key would read every file absent and the replay would run nothing."""
    root = tmp_path / "liger"
    shutil.copytree(liger_fakes_root(), root / "src")
    _two_commits(root)
    kernel = root / "src" / "liger_kernel" / "ops" / "fused_linear_cross_entropy.py"
    kernel.write_text(kernel.read_text() + "\n# a change to an executed file\n")
    _git(root, "commit", "-qam", "touch the kernel", "--date=2026-01-03T00:00:00")
    revisions = revisions_module.Revisions("liger", root, root / "cache", tmp_path / "trees", [])
    pending = history.discover(
        revisions, "HEAD", lambda paths: revisions_module.commits(root, paths, "2025-01-01", "HEAD")
    )
    assert "src/liger_kernel/ops/fused_linear_cross_entropy.py" in revisions.paths
    assert [c.subject for c in pending] == ["touch the kernel"]
    assert revisions.key(pending[0].sha) != revisions.key(pending[0].parent)


def test_a_history_where_no_revision_loads_is_an_error_not_an_empty_table(tmp_path, capsys):
    root = tmp_path / "verl"
    root.mkdir()
    (root / "README.md").write_text("no verl here\n")
    _two_commits(root)
    reports = tmp_path / "reports"
    assert history.main([f"verl={root}", "--since", "2025-01-01", "--reports", str(reports)]) == 3
    assert "no revision could be loaded" in capsys.readouterr().err
    assert not (reports / "verl" / "history.json").exists()


def liger_fakes_root():
    from pathlib import Path

    return Path(__file__).parent / "fakes" / "liger"


STOPPED = """
import os, signal, sys, tempfile, time
from harness.gate import history
class Announced(tempfile.TemporaryDirectory):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        print(self.name, flush=True)
def stopped_while_listing(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)
history.tempfile.TemporaryDirectory = Announced
history.discover = stopped_while_listing
sys.exit(history.main(["verl=" + sys.argv[1], "--reports", sys.argv[2]]))
"""


def test_a_replay_stopped_with_sigterm_removes_its_extracted_trees(tmp_path):
    """A killed replay must not leave its trees (gigabytes a revision pair) to fill /tmp for the next one."""
    done = subprocess.run(
        [sys.executable, "-c", STOPPED, str(tmp_path / "repo"), str(tmp_path / "reports")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=history.specs.ROOT,
    )
    trees = Path(done.stdout.split()[0])
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert trees.name.startswith("lph-history-") and not trees.exists()


def test_a_run_a_stopped_replay_left_unfinished_is_run_again_not_reused(tmp_path, monkeypatch):
    """Only a run the replay finished (stamped with its revision) is reused; pytest's partial verdicts are not."""
    revisions = revisions_module.Revisions("verl", tmp_path / "repo", tmp_path / "cache", tmp_path / "trees", [])
    monkeypatch.setattr(revisions, "side", lambda revision: history.comparison.Side(revision, "verl", {}))
    monkeypatch.setattr(revisions, "tree", lambda revision: tmp_path / revision)
    ran = []

    def run_checked(resolved, out, pytest_args):
        ran.append(out.name)
        return Run(target="verl", verdicts={"t": Verdict(id="t", outcome=PASS, tier="contract")}), 1.0

    monkeypatch.setattr(revisions_module, "run_checked", run_checked)
    out = revisions_module.runs_of(revisions.cache) / "k1"
    partial = {"t": Verdict(id="t", outcome=FAIL, tier="contract")}  # pytest's verdicts, the replay stopped
    Run(target="verl", verdicts=partial, meta={"profile": "history"}).save(out)
    run = revisions.run("k1", "abc")
    assert ran == ["k1"] and run.verdicts["t"].outcome == PASS and run.meta["revision"] == "abc"
    assert revisions.run("k1", "abc").verdicts["t"].outcome == PASS and ran == ["k1"]
