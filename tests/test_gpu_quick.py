"""The prepared device run (``bench.gpu_quick``): its plan and its step runner, with stand-in steps.

A GPU is lent for minutes: the run must do the five checks of the GPU issue in
their order, keep going past a step that fails or overruns (killing what
that step started), record each step as soon as it ends, and leave no more
files than the device returns. The real steps are never run here (the CPU dry
run, ``python -m bench.gpu_quick`` without a GPU, runs them: docs/usage.md).
"""

from __future__ import annotations

import json
import re
import time

import pytest
from hypothesis import Phase, settings

from bench import gpu_quick
from bench.gpu_quick import FAILED, OK, SKIPPED, TIMED_OUT, Step, plan, run_steps

ISSUE_ORDER = ["1-kernels", "2-bandwidth", "3-hidden", "4-topology", "5-calibration"]


def _python(code: str, name: str, limit_s: float = 30, keep: tuple = ()) -> Step:
    return Step(name, f"stand-in {name}", ("-c", code), limit_s, keep=keep)


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "cpu-dry-run"])
def test_plan_runs_the_five_checks_in_issue_order(cuda):
    steps = plan(cuda)
    assert [step.name for step in steps] == ISSUE_ORDER
    kernels, bandwidth, hidden, topology, calibration = steps
    assert {"tests/test_triton_kernels.py", "properties/test_forward_parity.py"} <= set(kernels.args)
    assert kernels.args[kernels.args.index("--target") + 1] == "impl-triton"
    assert ("-m", "bench.gpu_bench") == bandwidth.args[:2] and ("-m", "bench.gpu_hidden") == hidden.args[:2]
    assert "properties/test_topology.py" in topology.args and "bit_for_bit" in topology.args
    assert calibration.args[:2] == ("-m", "bench.gpu_calibration")
    if cuda:
        assert all(step.skip is None and step.env.get("LPH_DEVICE") == "cuda" for step in steps)
        assert kernels.env["HYPOTHESIS_PROFILE"] == topology.env["HYPOTHESIS_PROFILE"] == "device"
        assert sum(step.limit_s for step in steps) <= 8 * 60, "the device run must end inside 8 minutes"
    else:
        assert kernels.env["TRITON_INTERPRET"] == "1" and kernels.env["HYPOTHESIS_PROFILE"] == "interpreter"
        assert "--cpu" in bandwidth.args and "--cpu" in hidden.args
        assert calibration.skip and "CUDA" in calibration.skip
        assert all(step.skip is None for step in steps[:4])
    for step in (kernels, topology):  # a profile the plugin does not register would end the step at once
        profile = settings.get_profile(step.env["HYPOTHESIS_PROFILE"])
        assert profile.derandomize and profile.database is None


def test_device_profile_is_ci_without_shrinking_and_fewer_examples():
    ci, device = settings.get_profile("ci"), settings.get_profile("device")
    assert device.derandomize == ci.derandomize and device.max_examples == 20 < ci.max_examples
    assert Phase.shrink in ci.phases and Phase.shrink not in device.phases and Phase.generate in device.phases


def test_output_fits_what_the_device_returns():
    """At most 8 files, at most 2 folders down, names of letters, digits, '.', '_', '-' only."""
    files = [gpu_quick.STEPS_FILE, gpu_quick.LOG_FILE]
    files += [f"{step.name}/{name}" for step in plan(True) for name in step.keep]
    assert len(files) <= 8
    for path in files:
        assert path.count("/") <= 2 and all(re.fullmatch(r"[A-Za-z0-9._-]+", part) for part in path.split("/"))


def test_runner_records_failures_and_timeouts_and_runs_every_step(tmp_path):
    out = tmp_path / "out"
    marker = tmp_path / "grandchild-survived"
    # a grandchild that would write the marker after 2 s: killing the step must kill it too
    grandchild = f"import pathlib, time; time.sleep(2); pathlib.Path({str(marker)!r}).touch()"
    overrun = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(60)"
    # the step after a failure and a time-out finds both already recorded in steps.json
    sees_records = (
        f"import json, pathlib, sys; steps = json.loads(pathlib.Path({str(out / 'steps.json')!r}).read_text()); "
        f"sys.exit(0 if [s['outcome'] for s in steps['steps']] == [{FAILED!r}, {TIMED_OUT!r}] else 5)"
    )
    writes = "import sys, pathlib; pathlib.Path(sys.argv[1], 'result.json').write_text('{}'); print('done')"
    steps = [
        _python("import sys; print('about to fail'); sys.exit(3)", "a-fails"),
        _python(overrun, "b-overruns", limit_s=1),
        _python(sees_records, "c-checks"),
        Step("d-writes", "stand-in", ("-c", writes, gpu_quick.SCRATCH), 30, keep=("result.json", "absent.json")),
        Step("e-skipped", "stand-in", ("-c", "raise SystemExit(9)"), 30, skip="not on this machine"),
    ]
    started = time.monotonic()
    records = run_steps(steps, out, {"about": {"device": "test"}})
    assert time.monotonic() - started < 30, "the overrunning step was not stopped at its limit"

    assert [r["outcome"] for r in records] == [FAILED, TIMED_OUT, OK, OK, SKIPPED]
    assert records[0]["exit_code"] == 3 and "about to fail" in records[0]["tail"]
    assert records[1]["exit_code"] is None and records[1]["wall_s"] < 15
    assert records[3]["files"] == ["d-writes/result.json"] and (out / "d-writes" / "result.json").is_file()
    assert records[4]["reason"] == "not on this machine" and records[4]["files"] == []
    assert gpu_quick.failed(records) == ["a-fails", "b-overruns"]
    saved = json.loads((out / "steps.json").read_text())
    assert saved["steps"] == records and saved["plan"] == [s.name for s in steps] and saved["about"]["device"] == "test"
    log = (out / "log.txt").read_text()
    assert log.index("=== a-fails") < log.index("about to fail") < log.index("=== b-overruns") < log.index("done")
    time.sleep(2.5)
    assert not marker.exists(), "a process the timed-out step started outlived it"


def test_main_exits_non_zero_when_a_step_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_quick, "plan", lambda cuda, profile: [_python("raise SystemExit(1)", "only")])
    assert gpu_quick.main(["--out", str(tmp_path)]) == 1
    monkeypatch.setattr(gpu_quick, "plan", lambda cuda, profile: [_python("pass", "only")])
    assert gpu_quick.main(["--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "steps.json").read_text())["steps"][0]["outcome"] == OK
