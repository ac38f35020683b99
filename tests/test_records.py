"""The generated records: what is committed is what the generator renders, a rerun changes nothing, an import
takes only newer runs, and the conformance page is whole (a row per run, a column per check, no dead link).

``docs/records/`` is never edited by hand (its pages say so): a family record,
an expectations file or a gate snapshot that changed without ``nox -s docs``
makes the first test fail, naming the page.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.records import conformance, history, store
from harness.records.__main__ import pages, write


def test_committed_records_are_what_the_generator_renders():
    stale = [
        str(path.relative_to(store.RECORDS))
        for path, text in pages(store.RECORDS).items()
        if not path.is_file() or path.read_text() != text
    ]
    assert not stale, f"run `nox -s docs` and commit: {stale}"


def test_rendering_twice_changes_nothing(tmp_path):
    assert write(pages(tmp_path), tmp_path)
    assert write(pages(tmp_path), tmp_path) == []


def _gate_dir(root: Path, name: str, date: str, outcome: str) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    about = {"spec": "impl", "family": "", "slug": "impl", "version": "", "date": date, "harness": "abc"}
    row = {"id": "properties/x.py::test_a", "output": "", "tier": "contract", "outcome": outcome}
    body = {"mode": "single", "exit_code": 0, "counts": {outcome: 1}, "notes": [], "about": about, "rows": [row]}
    (directory / "gate.json").write_text(json.dumps(body))
    return directory


def test_an_import_takes_only_runs_newer_than_the_record(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "GATES", tmp_path / "data" / "gates")
    _gate_dir(tmp_path / "reports", "new", "2026-11-02", "PASS")
    assert store.import_reports(tmp_path / "reports") == [f"gate impl: {tmp_path / 'reports' / 'new'}"]
    _gate_dir(tmp_path / "older", "old", "2026-10-01", "FAIL")
    assert store.import_reports(tmp_path / "older") == []
    assert store.load_all(store.GATES)["impl"]["rows"][0]["outcome"] == "PASS"


def test_a_familys_commits_and_its_releases_are_two_records_neither_replacing_the_other(tmp_path, monkeypatch):
    """SkyRL's history is its repository's commits and its PyPI releases: importing one must not drop the other."""
    monkeypatch.setattr(store, "HISTORIES", tmp_path / "data" / "history")
    for folder, source, releases in (("commits", "/mirror/skyrl", False), ("releases", "pypi", True)):
        about = {"family": "skyrl", "date": "2026-11-28", "source": source, "releases": releases}
        (tmp_path / "r" / folder / "skyrl").mkdir(parents=True)
        (tmp_path / "r" / folder / "skyrl" / "history.json").write_text(json.dumps({"about": about, "rows": []}))
    store.import_reports(tmp_path / "r")
    assert sorted(store.load_all(store.HISTORIES)) == ["skyrl", "skyrl-releases"]
    older = {"family": "trl", "date": "2026-11-27", "source": "pypi"}  # written before tables said which they were
    assert store.history_name({"about": older}) == "trl-releases"


def test_a_base_vs_pr_run_is_not_a_record_and_the_import_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "GATES", tmp_path / "data" / "gates")
    (tmp_path / "r" / "a-vs-b").mkdir(parents=True)
    (tmp_path / "r" / "a-vs-b" / "gate.json").write_text(json.dumps({"mode": "compare", "exit_code": 1}))
    (line,) = store.import_reports(tmp_path / "r")
    assert line.startswith("gate skipped:") and "base-vs-PR" in line


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.hrefs, self.rows, self.columns = set(), [], [], 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "href" in attrs:
            self.hrefs.append(attrs["href"])
        if tag == "tr" and "data-family" in attrs:
            self.rows.append(attrs["data-family"])
        if tag == "th" and attrs.get("class") == "check":
            self.columns += 1


def _snapshot(date, rows):
    about = {"spec": "x", "family": "", "slug": "x", "version": "", "date": date, "harness": "abc"}
    return {"about": about, "exit_code": 0, "counts": {}, "rows": rows}


def _row(check, output, outcome):
    return {"id": check, "output": output, "tier": "contract", "outcome": outcome, "detail": "", "reproduce": "r"}


def test_the_conformance_page_has_a_row_per_run_a_column_per_check_and_no_dead_link():
    snapshots = {
        "impl": _snapshot("2026-11-01", [_row("p/a.py::t1", "", "PASS"), _row("p/b.py::t2", "", "PASS")]),
        "slime": _snapshot("2026-11-02", [_row("p/a.py::t1", "grad(logits)", "KNOWN"), _row("p/c.py::t3", "", "FAIL")]),
    }
    page = _Page()
    page.feed(conformance.render(snapshots, {"slime"}))
    assert page.rows == ["impl", "slime"] and page.columns == 3
    for href in page.hrefs:
        if href.startswith("#"):
            assert href[1:] in page.ids, href
        else:
            assert href.split("#")[0] == "families/slime.md", href


def test_the_committed_conformance_page_links_only_what_exists():
    page = _Page()
    page.feed((store.RECORDS / "conformance.html").read_text())
    assert page.rows == sorted(store.load_all(store.GATES), key=lambda n: (n != "impl", n))
    for href in page.hrefs:
        target, _, anchor = href.partition("#")
        if not target:
            assert anchor in page.ids, href
        else:
            assert (store.RECORDS / target).is_file(), href


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt install chromium) to render the page")
def test_the_conformance_page_renders_in_a_browser(tmp_path):
    """What a reader's browser builds from the page: the table with a row per run (headless Chromium's DOM)."""
    page = store.RECORDS / "conformance.html"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    parsed = _Page()
    parsed.feed(dom)
    assert 'id="conformance"' in dom and parsed.rows == sorted(
        store.load_all(store.GATES), key=lambda n: (n != "impl", n)
    )


def _history_row(commit, new_fail=(), fixed=(), errors=()):
    row = {"commit": commit, "date": "2026-01-01", "title": commit, "new_fail": list(new_fail), "fixed": list(fixed)}
    return {**row, "still_failing": 0, "errors": list(errors), "would_block": bool(new_fail)}


def test_only_defect_rows_count_as_blocks_or_fixes(tmp_path):
    rows = [
        _history_row("a1", new_fail=["p.py::t [contract]"]),
        _history_row("b2", new_fail=["p.py::u [contract]"]),
        _history_row("c3", fixed=["p.py::t [contract]"]),
        _history_row("d4", new_fail=["p.py::v [contract]"]),
        _history_row("e5", errors=["adapter cannot load e5: no file"]),
    ]
    (tmp_path / "fam.toml").write_text(
        '[[row]]\ncommit = "a1"\nattribution = "defect"\nwhy = "loss.py: the mask sum"\n'
        '[[row]]\ncommit = "b2"\nattribution = "reachable"\nwhy = "chunking became declared"\n'
        '[[row]]\ncommit = "c3"\nattribution = "defect"\nwhy = "loss.py: reverted"\n'
    )
    attributed = history.attributions("fam", tmp_path)
    counts = history.summary(rows, attributed)
    assert counts["defect blocks"] == 1 and counts["defect fixes"] == 1 and counts["reachable"] == 1
    assert counts["unattributed"] == 1 and counts["ERROR"] == 1
    about = {"family": "fam", "date": "2026-11-27", "harness": "abc", "total": 5, "since": "2025-06-01",
             "selection": "all",
             "keyed_by": ["p/loss.py", "p/trainer.py"], "alone": {"p/trainer.py": ["Trainer.loss"]},
             "source": "/repo"}  # fmt: skip
    page = history.render("fam", {"about": about, "rows": rows}, attributed)
    assert "| `d4` |" in page and "unattributed" in page and "loss.py: the mask sum" in page
    assert "`p/loss.py`, `p/trainer.py` (only `Trainer.loss`)." in page  # a file keyed by its loaded part


def test_an_attribution_on_a_row_that_changed_nothing_is_not_shown(tmp_path):
    """An attribution written for an older replay (its row's change came from the harness) explains nothing here."""
    rows = [_history_row("a1"), _history_row("b2", new_fail=["p.py::t [contract]"])]
    (tmp_path / "fam.toml").write_text(
        '[[row]]\ncommit = "a1"\nattribution = "harness"\nwhy = "the old detectors compared by message"\n'
        '[[row]]\ncommit = "b2"\nattribution = "defect"\nwhy = "loss.py: the mask sum"\n'
    )
    attributed = history.attributions("fam", tmp_path)
    about = {"family": "fam", "date": "2026-11-27", "harness": "abc", "total": 2, "since": "2025-06-01",
             "selection": "all",
             "keyed_by": ["p/loss.py"], "source": "/repo"}  # fmt: skip
    page = history.render("fam", {"about": about, "rows": rows}, attributed)
    assert "old detectors" not in page and "| `a1` | 2026-01-01 | a1 | - | - | - | - | - |" in page
    assert "loss.py: the mask sum" in page and history.summary(rows, attributed)["harness"] == 0


def test_a_table_whose_replay_stopped_before_its_window_ends_says_how_far_it_got():
    """A long replay is committed as it goes: a partial table must not read as the window's whole history."""
    rows = [_history_row("a1")]
    about = {"family": "fam", "date": "2026-11-28", "harness": "abc", "total": 9, "since": "2025-06-01",
             "selection": "all",
             "keyed_by": ["p/loss.py"], "source": "/repo", "through": "a1 2025-06-03", "complete": False}  # fmt: skip
    page = history.render("fam", {"about": about, "rows": rows}, {})
    assert "**Not yet whole**: replayed through a1 2025-06-03" in page and "harness abc" in page
    whole = history.render("fam", {"about": {**about, "complete": True}, "rows": rows}, {})
    assert "Not yet whole" not in whole


def test_an_attribution_outside_the_four_kinds_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "fam.toml").write_text('[[row]]\ncommit = "a1"\nattribution = "bug"\nwhy = "x"\n')
    with pytest.raises(ValueError, match="fam.toml: row 'a1' needs commit, attribution"):
        history.attributions("fam", tmp_path)


def test_the_newest_blocking_base_vs_pr_run_is_the_readme_example(tmp_path, monkeypatch):
    from harness.records.__main__ import example_page

    monkeypatch.setattr(store, "GATES", tmp_path / "data" / "gates")
    monkeypatch.setattr(store, "EXAMPLE", tmp_path / "data" / "example-summary.json")
    for name, date, code in (("old-vs-base", "2026-11-01", 1), ("green-vs-base", "2026-11-03", 0)):
        directory = tmp_path / "r" / name
        directory.mkdir(parents=True)
        about = {"spec": name, "baseline": "impl", "date": date, "harness": "abc"}
        (directory / "gate.json").write_text(json.dumps({"mode": "compare", "exit_code": code, "about": about}))
        (directory / "summary.md").write_text(f"## {name}\n")
    assert "example comment:" in store.import_reports(tmp_path / "r")[-1]
    example = json.loads(store.EXAMPLE.read_text())
    assert example["about"]["spec"] == "old-vs-base"  # a green run posts nothing worth showing
    assert example_page(example).endswith("## old-vs-base\n")
    assert not [line for line in store.import_reports(tmp_path / "r") if line.startswith("example")]


def _bench_run(folder: Path, date: str, mean: float) -> Path:
    folder.mkdir(parents=True)
    about = {"date": date, "harness": "abc", "command": "nox -s bench", "device": "CPU: 2 cores, x86_64"}
    about |= {"load": "0.5 0.4 0.3", "torch": "2.13.0", "cuda": "none", "python": "3.11"}
    (folder / "about.json").write_text(json.dumps(about))
    factors = (("naive", 1), ("impl", 0.5))
    speed = {name: {"4x8": {"mean_s": mean * k, "speedup_vs_naive": 1 / k}} for name, k in factors}
    (folder / "speed.json").write_text(json.dumps(speed))
    return folder


def test_a_bench_run_becomes_the_record_only_when_newer_and_says_what_it_ran_on(tmp_path):
    from harness.records import measurements

    data = tmp_path / "data" / "bench"
    assert store.import_measurement(_bench_run(tmp_path / "new" / "bench", "2026-11-27T06:00:00+00:00", 2.0), data)
    assert not store.import_measurement(_bench_run(tmp_path / "old" / "bench", "2026-11-20T06:00:00+00:00", 9.0), data)
    assert not store.import_measurement(tmp_path / "nothing" / "bench", data)  # no about.json: not a record
    page = measurements.render_bench(measurements._load(data))
    assert "harness abc: CPU: 2 cores, x86_64, load 0.5 0.4 0.3" in page
    assert "| impl | 1.000 s (2.00x) |" in page and "9.000" not in page


def test_a_gpu_page_without_a_run_says_how_to_make_one():
    from harness.records import measurements

    page = measurements.render_gpu({})
    assert "No run recorded yet" in page and "nox -s gpu" in page


def _quick_run(folder: Path, mode: str) -> Path:
    """A prepared GPU run's output (bench.gpu_quick): its facts in steps.json, each step's file in its folder."""
    about = {"date": "2026-11-28T08:35:59+00:00", "harness": "abc", "command": "python -m bench.gpu_quick"}
    about |= {"device": "GPU, x86_64", "load": "0.2 0.0 0.0", "torch": "2.11.0", "cuda": "13.0", "python": "3.12"}
    about |= {"driver": "580.1", "triton": "3.6.0", "mode": mode}
    step = {"step": "3-hidden", "what": "the hidden path", "outcome": "failed", "wall_s": 20.2, "limit_s": 45}
    (folder / "3-hidden").mkdir(parents=True)
    step |= {"reason": "exit code 1", "tail": ["impl 0.25 ms", "no chunked op here", "=== 3-hidden: failed in 20.2 s"]}
    (folder / "steps.json").write_text(json.dumps({"about": about, "steps": [step]}))
    hidden = {"rounds": 5, "chunk": 1024, "left_out": {"torch-chunked": "this torch has none"}}
    hidden["shapes"] = {"8x4x16": {"impl": {"seconds": 0.25, "seconds_min": 0.2, "peak_bytes": 2**21}}}
    (folder / "3-hidden" / "hidden.json").write_text(json.dumps(hidden))
    return folder


def test_the_prepared_gpu_run_is_a_record_and_its_cpu_dry_run_is_not(tmp_path):
    from harness.records import measurements

    data = tmp_path / "data" / "gpu"
    assert not store.import_measurement(_quick_run(tmp_path / "dry" / "quick", "CPU dry run: ..."), data, "gpu")
    assert not data.exists()
    assert store.import_measurement(_quick_run(tmp_path / "run" / "quick", "cuda"), data, "gpu")
    page = measurements.render_gpu(measurements._load(data))
    assert "(CUDA 13.0, driver 580.1, Triton 3.6.0)" in page
    # a failed step's reason ends with the last line it printed (the step's own end marker is not one)
    assert "| 3-hidden | the hidden path | failed | 20 | 45 | exit code 1: no chunked op here |" in page
    assert "| 8x4x16 | impl | 0.250 | 0.200 | 2.0 |" in page and "`torch-chunked`: this torch has none" in page
