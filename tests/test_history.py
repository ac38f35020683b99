"""The history replay (harness/gate/history.py) for any family, on a throwaway git repository: offline, fast.

A tiny repository holding the verl stand-in tree is committed three times
(the correct tree, a revision that touches no file under test, a revision
whose ``tensor_parallel.py`` lacks what the adapter needs). The replay must
pick only the commits touching the adapter's files, key revisions by those
files' blobs, and give the unloadable revision an ERROR row with the
adapter's reason, never a verdict (the suite is not run for it).
"""

import shutil
import subprocess

import pytest

from harness.gate import history
from harness.targets.verl import source
from tests.fakes.verl import targets as fakes

TENSOR_PARALLEL = source.TENSOR_PARALLEL


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture()
def repo(tmp_path):
    root = tmp_path / "verl"
    shutil.copytree(fakes.HERE / "correct", root)
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "correct tree", "--date=2026-01-01T00:00:00")
    (root / "README.md").write_text("no file under test\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "docs only", "--date=2026-01-02T00:00:00")
    (root / TENSOR_PARALLEL).write_text("def vocab_parallel_log_probs_from_logits(logits, labels):\n    return None\n")
    _git(root, "commit", "-qam", "drop the entropy", "--date=2026-01-03T00:00:00")
    return root


def test_only_commits_touching_the_adapters_files_are_replayed(repo):
    paths = history.files_under_test("verl")
    found = history.commits(repo, paths, "2025-01-01", "HEAD")
    assert [c.subject for c in found] == ["drop the entropy"]  # the first commit has no parent to compare with
    assert history.content_key(repo, "HEAD~1", paths) == history.content_key(repo, "HEAD~2", paths)
    assert history.content_key(repo, "HEAD", paths) != history.content_key(repo, "HEAD~1", paths)


def test_a_revision_the_adapter_cannot_load_is_an_error_row_with_its_reason(repo, tmp_path, monkeypatch):
    def no_suite(*args, **kwargs):
        raise AssertionError("the suite must not run for a revision the adapter cannot load")

    monkeypatch.setattr(history, "run_checked", no_suite)
    reports = tmp_path / "reports"
    assert history.main([f"verl={repo}", "--since", "2025-01-01", "--reports", str(reports)]) == 0
    (row,) = history.json.loads((reports / "verl" / "history.json").read_text())
    assert row["title"] == "drop the entropy" and not row["would_block"] and not row["new_fail"]
    (error,) = row["errors"]
    assert error.startswith("adapter cannot load") and "defines no vocab_parallel_entropy" in error
    assert "adapter cannot load" in (reports / "verl" / "history.md").read_text()
