"""The prepared device run: five GPU checks in a fixed order and time (``python -m bench.gpu_quick --out DIR``).

A GPU is lent for minutes, so one command runs, in this order, each step in
its own process with its own time limit, and records each outcome as soon
as the step ends (a run killed at the machine's limit still returns what it
finished):

1. ``1-kernels``: the Triton kernels against the float64 oracles: the token
   and packed forward and backward parity properties (fp32, bf16 and fp16,
   entropy on and off, tp 1, 2 and 4 sharing the GPU over gloo) against
   ``impl-triton`` with ``LPH_DEVICE=cuda``, plus ``tests/test_triton_kernels.py``
   (on CUDA that file skips itself: its checks are of the interpreter);
2. ``2-bandwidth``: ``bench.gpu_bench`` at 4096x32000, 1024x151936 and
   8192x151936, fp32 and bf16 (GB/s and fraction of the three-pass floor
   against a measured device copy); Liger's row where ``liger_kernel`` is
   importable (a carried wheel: docs/usage.md, "GPU");
3. ``3-hidden``: ``bench.gpu_hidden``, the hidden-state path against torch's
   chunked ``linear_cross_entropy`` (time and peak, two shapes);
4. ``4-topology``: the ``_bit_for_bit`` topology twins on CUDA (impl);
5. ``5-calibration``: ``bench.gpu_calibration``, the tracker against the
   CUDA allocator.

Both pytest steps run the ``ci`` profile's settings with 20 examples and
no shrinking (the ``device`` profile): shrinking a failure can take minutes, which would
cost the verdict at the step's limit; the failing example is still printed.
``--profile`` picks another (``dev``: 15 random examples, if 1-kernels
overruns).

Limits (``LIMITS_S``; 465 s in all, so the run ends inside 8 minutes with
the runner's own start), from the H200 session of 2026-11-28
(``docs/records/gpu.md``, ``docs/triton.md``): 1-kernels, eight properties on
8 workers, where Triton compiles each new shape: ci's 80 examples finished 2
of 8 properties in 150 s, 15 examples took 72 to 107 s, so the ``device``
profile runs 20 in 200 s; 2-bandwidth, 97 s, mostly ``torch.compile`` (one
compile per shape and dtype) and the float64 oracle on the CPU, 130 s, the
trainer shapes first; 3-hidden, 20 s, 40 s; 4-topology, 32 s at 80 examples,
60 s; 5-calibration, 9 s, 35 s. A step over its limit is killed with every
process it started and recorded as timed out; the next step still runs.

Without a CUDA device the same plan runs in a CPU form, the dry run that
proves the script end to end before device time is spent: the kernels under
``TRITON_INTERPRET=1`` with the ``interpreter`` profile, the two tables on
tiny shapes (``--cpu``: perf_counter, a memcpy for the copy bandwidth; the
figures mean nothing, the reports say "CPU dry run"), the topology twins
with the ``smoke`` profile, the calibration skipped with its reason.

Output (at most 8 files, 2 folders deep: what the device returns):
``DIR/steps.json`` (the machine, the plan, one record per finished step:
outcome ok / failed / timed out / skipped, reason, wall seconds, limit,
files, the output's last lines), ``DIR/log.txt`` (every step's output as
it is written) and each step's result file in ``DIR/<step>/``. Exit 1 when
a step failed or timed out. Needs only torch, triton, pytest and hypothesis
(pytest-xdist where installed); no nox.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.about import about

ROOT = Path(__file__).resolve().parents[1]
OUT = Path("reports/gpu/quick")
STEPS_FILE, LOG_FILE = "steps.json", "log.txt"
OK, FAILED, TIMED_OUT, SKIPPED = "ok", "failed", "timed out", "skipped"
ORDER = ("1-kernels", "2-bandwidth", "3-hidden", "4-topology", "5-calibration")
LIMITS_S = {"1-kernels": 200, "2-bandwidth": 130, "3-hidden": 40, "4-topology": 60, "5-calibration": 35}
CPU_LIMIT_S = 240  # per step in the CPU dry run (the whole run: 1.3 to 5.5 minutes on two cores, by their load)
GPU_WORKERS = 8  # pytest-xdist workers on the GPU machine's 16 cores (docs/usage.md, "GPU": do not oversubscribe)
KERNEL_TESTS = (
    "tests/test_triton_kernels.py",
    "properties/test_forward_parity.py",
    "properties/test_backward_parity.py",
)
# The trainer shapes first: bench.json is written after each shape, so a bench stopped at its limit keeps them.
BANDWIDTH_SHAPES = (
    "8192x151936",
    "8192x151936-bf16",
    "1024x151936",
    "1024x151936-bf16",
    "4096x32000",
    "4096x32000-bf16",
)
TAIL_LINES = 6
SCRATCH = "{scratch}"  # in a command: the step's own scratch folder (its results are copied from there)


@dataclass(frozen=True)
class Step:
    """One step: a command run as ``python ARGS`` in the repository root, or the reason it is skipped."""

    name: str
    what: str
    args: tuple[str, ...] = ()
    limit_s: float = 60
    env: dict = field(default_factory=dict)
    keep: tuple[str, ...] = ()  # files of its scratch folder copied to DIR/<name>/
    skip: str | None = None


def _pytest(*selection: str, workers: int = 0) -> tuple[str, ...]:
    parallel = ("-n", str(workers)) if workers > 1 and importlib.util.find_spec("xdist") else ()
    return ("-m", "pytest", *selection, "-v", "-p", "no:cacheprovider", *parallel, f"--report-dir={SCRATCH}")


def plan(cuda: bool, profile: str | None = None) -> list[Step]:
    """The five steps in issue order: their CUDA form, or the CPU dry run's (``profile`` overrides Hypothesis')."""
    if cuda:
        device_env = {"LPH_DEVICE": "cuda"}
        # xdist workers' rank pools share the GPU machine's cores, and a rank's first job of a shape compiles
        # its kernels: a higher deadline floor, so that is never read as a hang (docs/usage.md, "GPU").
        pytest_env = {**device_env, "HYPOTHESIS_PROFILE": profile or "device", "LPH_DEADLINE_FLOOR_S": "20"}
        kernel_env = topology_env = pytest_env
        limits, workers = LIMITS_S, GPU_WORKERS
    else:
        # One thread per process: on a shared CPU, torch's OpenMP threads spin against the other loads and
        # stretch millisecond ops to seconds.
        device_env = {"OMP_NUM_THREADS": "1"}
        kernel_env = {**device_env, "TRITON_INTERPRET": "1", "HYPOTHESIS_PROFILE": profile or "interpreter"}
        topology_env = {**device_env, "HYPOTHESIS_PROFILE": profile or "smoke"}
        limits, workers = dict.fromkeys(ORDER, CPU_LIMIT_S), 0
    cpu_flag = () if cuda else ("--cpu",)
    bench_args = ("--shapes", *BANDWIDTH_SHAPES) if cuda else cpu_flag
    return [
        Step(
            "1-kernels",
            "Triton kernels vs the float64 oracles: token/packed forward and backward parity, impl-triton",
            _pytest(*KERNEL_TESTS, "-k", "not policy_loss", "--target", "impl-triton", workers=workers),
            limits["1-kernels"],
            kernel_env,
            keep=("verdicts.json",),
        ),
        Step(
            "2-bandwidth",
            "forward+backward time and bandwidth against the 3-pass floor (bench.gpu_bench)",
            ("-m", "bench.gpu_bench", "--out", SCRATCH, *bench_args),
            limits["2-bandwidth"],
            device_env,
            keep=("bench.json",),
        ),
        Step(
            "3-hidden",
            "hidden-state path vs torch's chunked linear_cross_entropy, time and peak (bench.gpu_hidden)",
            ("-m", "bench.gpu_hidden", "--out", SCRATCH, *cpu_flag),
            limits["3-hidden"],
            device_env,
            keep=("hidden.json",),
        ),
        Step(
            "4-topology",
            "topology bit for bit (the _bit_for_bit twins), impl",
            _pytest("properties/test_topology.py", "-k", "bit_for_bit"),
            limits["4-topology"],
            topology_env,
            keep=("verdicts.json",),
        ),
        Step(
            "5-calibration",
            "tracker peak vs torch.cuda.max_memory_allocated (bench.gpu_calibration)",
            ("-m", "bench.gpu_calibration", "--out", SCRATCH),
            limits["5-calibration"],
            device_env,
            keep=("calibration.json",),
            skip=None if cuda else "no CUDA device: it measures the CUDA caching allocator, which a CPU run lacks",
        ),
    ]


def _kill(process: subprocess.Popen) -> None:
    """End the step and every process it started (its own session: rank pools, xdist workers)."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(log: Path, offset: int) -> list[str]:
    with log.open("rb") as handle:
        handle.seek(offset)
        text = handle.read().decode(errors="replace")
    return [line for line in text.splitlines() if line.strip()][-TAIL_LINES:]


def run_step(step: Step, out: Path, scratch: Path) -> dict:
    """Run one step (or record its skip); its output goes to ``out/log.txt`` as it is written."""
    record = {"step": step.name, "what": step.what, "limit_s": step.limit_s}
    if step.skip is not None:
        return {**record, "outcome": SKIPPED, "reason": step.skip, "wall_s": 0.0, "files": []}
    folder = scratch / step.name
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, *(arg.replace(SCRATCH, str(folder)) for arg in step.args)]
    log = out / LOG_FILE
    with log.open("ab") as handle:
        handle.write(f"\n=== {step.name}: {step.what} (limit {step.limit_s:g} s)\n$ {' '.join(command)}\n".encode())
        handle.flush()
        offset = handle.tell()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **step.env}
        started = time.monotonic()
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=step.limit_s)
            outcome = OK if code == 0 else FAILED
            reason = None if code == 0 else f"exit code {code}"
        except subprocess.TimeoutExpired:
            _kill(process)
            code, outcome, reason = None, TIMED_OUT, f"killed at its limit of {step.limit_s:g} s"
        wall = time.monotonic() - started
        handle.write(f"=== {step.name}: {outcome} in {wall:.1f} s\n".encode())
    files = []
    for name in step.keep:
        if (folder / name).is_file():
            (out / step.name).mkdir(exist_ok=True)
            shutil.copyfile(folder / name, out / step.name / name)
            files.append(f"{step.name}/{name}")
    return {
        **record,
        "outcome": outcome,
        "reason": reason,
        "exit_code": code,
        "wall_s": round(wall, 1),
        "files": files,
        "tail": _tail(log, offset),
    }


def _write(out: Path, report: dict) -> None:
    partial = out / f".{STEPS_FILE}.partial"
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(out / STEPS_FILE)


def run_steps(steps: list[Step], out: Path, header: dict | None = None) -> list[dict]:
    """Every step in order, whatever the last one's outcome; ``out/steps.json`` rewritten as each one ends."""
    out.mkdir(parents=True, exist_ok=True)
    (out / LOG_FILE).write_bytes(b"")
    report = {**(header or {}), "plan": [step.name for step in steps], "steps": []}
    _write(out, report)
    with tempfile.TemporaryDirectory(prefix="lph-gpu-quick-") as scratch:
        for step in steps:
            report["steps"].append(run_step(step, out, Path(scratch)))
            _write(out, report)
            last = report["steps"][-1]
            print(f"{step.name:14} {last['outcome']:9} {last['wall_s']:7.1f} s  {last.get('reason') or ''}", flush=True)
    return report["steps"]


def failed(records: list[dict]) -> list[str]:
    return [r["step"] for r in records if r["outcome"] in (FAILED, TIMED_OUT)]


def _machine(cuda: bool) -> dict:
    """What ran: bench.about's record (revision, device, torch), or why it could not be read."""
    try:
        facts = about("python -m bench.gpu_quick")
    except Exception as exc:  # noqa: BLE001 - a missing git must not stop the run it describes
        date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        facts = {"date": date, "torch": torch.__version__, "error": f"{type(exc).__name__}: {exc}"}
    facts["mode"] = "cuda" if cuda else "CPU dry run: figures show that every step runs; they are not GPU speeds"
    if importlib.util.find_spec("triton"):
        import triton

        facts["triton"] = triton.__version__
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_quick", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    parser.add_argument(
        "--profile",
        default=None,
        help="Hypothesis profile of the two pytest steps (default: device; CPU dry run: "
        "interpreter for the kernels, smoke for the topology)",
    )
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    steps = plan(cuda, args.profile)
    header = _machine(cuda)
    print(f"python -m bench.gpu_quick: {header['mode']}; writing {args.out}/", flush=True)
    records = run_steps(steps, args.out, {"about": header, "limits_s": sum(s.limit_s for s in steps if not s.skip)})
    bad = failed(records)
    if bad:
        print(f"failed or timed out: {', '.join(bad)} (see {args.out / LOG_FILE})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
