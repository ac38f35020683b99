"""Every entry point of the harness (docs/usage.md, "Sessions", says what each one does).

Virtualenvs are reused between runs; torch is pinned to the CPU wheel the
machines carry (2.13.0) so no session ever pulls a multi-GB CUDA build.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

PYTHON = "3.11"
TORCH = "torch==2.13.0"
# The Triton backend's pins: its kernels run on the CPU under Triton's interpreter, which needs numpy.
TRITON = ["triton==3.9.0", "numpy==2.4.6"]
SUITE = ["properties", "regressions"]
TRITON_KERNEL_TESTS = "tests/test_triton_kernels.py"
# The Triton backend does not promise the same bits across TP degrees (it does not declare topology_invariant:
# its kernels sum in tile order relative to the rank-local max, docs/topology.md), so the bit-for-bit topology
# twins, which fail on it as documented, are left out of its run; the within-policy topology checks still run.
TRITON_NOT_PROMISED = [
    "--deselect=properties/test_topology.py::test_topology_invariance_bit_for_bit",
    "--deselect=properties/test_topology.py::test_token_topology_invariance_bit_for_bit",
]
# Short names of targets `nox -s check -- --target NAME` accepts beside impl (the gate takes module:attr).


def _install(session: nox.Session, extra: str = "test") -> None:
    session.install(TORCH, *TRITON)
    session.install("-e", f".[{extra}]")


def _workers() -> list[str]:
    """pytest-xdist workers: one per core, at most 4 (each holds its own rank pools); ``LPH_WORKERS=1``: none."""
    count = int(os.environ.get("LPH_WORKERS", min(os.cpu_count() or 1, 4)))
    # worksteal: an idle worker takes queued tests from a busy one, so a long test near the end does not leave
    # the other core waiting (the mutant and gate self-tests run for tens of seconds each).
    return ["-n", str(count), "--dist", "worksteal"] if count > 1 else []


def _suite(session: nox.Session, *selection: str) -> None:
    """The whole suite twice: on impl (torch), then on the Triton kernels under Triton's CPU interpreter."""
    workers = _workers()
    first = ["tests", *SUITE, f"--ignore={TRITON_KERNEL_TESTS}"]
    profile = {"HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "suite")}
    session.run("python", "-m", "pytest", *first, *workers, *selection, *session.posargs, env=profile)
    session.run(
        "python",
        "-m",
        "pytest",
        TRITON_KERNEL_TESTS,
        *SUITE,
        *TRITON_NOT_PROMISED,
        "--target",
        "impl-triton",
        *workers,
        *selection,
        *session.posargs,
        env={"TRITON_INTERPRET": "1", "HYPOTHESIS_PROFILE": "interpreter"},
    )


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The CI gate: self-tests, every property and regression against impl/ (torch), one mutant per bug class,
    then the Triton backend (target impl-triton) under Triton's CPU interpreter.

    The first run draws 50 derandomised examples per property (the ``suite`` profile, on CI and a developer's
    machine alike; ``HYPOTHESIS_PROFILE`` chooses another). The second run is the whole property and regression
    suite again, plus the kernels' own tests, on the Triton kernels (TRITON_INTERPRET=1), with the `interpreter`
    Hypothesis profile (6 derandomised examples per property) and the target's case limits
    (harness/targets/impl_triton.py): the interpreter costs milliseconds per kernel op. Both runs use
    pytest-xdist (``_workers``). Checks marked ``nightly`` (the mutants beyond one per bug class) run in
    ``nox -s slow``. Arguments after -- go to both runs.
    """
    _install(session)
    _suite(session, "-m", "not nightly")


@nox.session(python=PYTHON)
def slow(session: nox.Session) -> None:
    """What ``nox -s tests`` leaves out (``-m nightly``), nightly: the mutants beyond one per bug class and the
    end-to-end gate runs (a hang waited out on both sides, two real-scale traces, the isolation stand-ins) whose
    rules the suite unit-tests."""
    _install(session)
    session.run("python", "-m", "pytest", "tests", "-m", "nightly", *_workers(), *session.posargs)


@nox.session(python=PYTHON)
def quick(session: nox.Session) -> None:
    """The edit-test loop: the suite on impl (torch) without the ``slow`` and ``nightly`` checks (subprocess
    pytest and gate runs, mutants, the rank pool's self-tests), ``dev`` profile (15 examples
    per property). Not a gate: ``nox -s tests`` before you push."""
    _install(session)
    first = ["tests", *SUITE, f"--ignore={TRITON_KERNEL_TESTS}", "-m", "not slow and not nightly"]
    session.run("python", "-m", "pytest", *first, *_workers(), *session.posargs, env={"HYPOTHESIS_PROFILE": "dev"})


@nox.session(python=PYTHON)
def check(session: nox.Session) -> None:
    """Run properties + regressions against one target (--target T, default impl), every tier gated.

    Verdict table grouped by tier, reports/<target>/ (junit.xml, verdicts.json, report.md, gate.json).
    """
    _install(session)
    args = list(session.posargs)
    target = "impl"
    if "--target" in args:
        at = args.index("--target")
        target = args[at + 1]
        del args[at : at + 2]
    session.run("python", "-m", "harness.gate", target, "--tiers", "contract,budget,hardening", *args)


@nox.session(python=PYTHON)
def upstream(session: nox.Session) -> None:
    """Gate upstream code: `nox -s upstream -- SPEC [--baseline SPEC] [gate options] [pytest args]`.

    SPEC: ``skyrl==X`` (PyPI, no dependencies, its own directory), ``skyrl=PATH``,
    ``slime=PATH`` or ``nemo_rl=PATH`` (a checkout), or any ``module:attr`` /
    ``path.py:attr`` adapter. One target: exit non-zero on an unexpected
    failure in a gated tier (contract by default; ``--tiers``), known failures
    from ``expectations/<family>.toml`` (``--expectations``, ``--strict``,
    ``--update-expectations``). ``--baseline SPEC``: base vs PR, exit non-zero
    on a NEW FAIL (every tier gated by default). See harness/gate/runner.py.
    """
    if not session.posargs:
        session.error("usage: nox -s upstream -- SPEC [--baseline SPEC] [--tiers ...] [pytest args]")
    _install(session)
    session.run("python", "-m", "harness.gate", *session.posargs)


@nox.session(python=PYTHON)
def history(session: nox.Session) -> None:
    """Would the gate have caught it? Base-vs-PR over an upstream repository's commits (harness/gate/history.py).

    `nox -s history -- FAMILY=PATH_TO_GIT_REPO [--since 2025-12-01] [--until REV] [--tags PATTERN]`,
    FAMILY one of slime, miles, verl, skyrl, nemo_rl, liger, trl, te, ms_swift: verdicts cached per revision of the
    files the family's adapter loads, table in reports/history/<family>/history.md; a revision the adapter cannot load
    is an ERROR row. `--tags 'v2.*'` replays consecutive release tags instead of commits; `FAMILY==pypi` (or
    `FAMILY==V1,V2,...`) a PyPI family's published releases (harness/gate/releases.py). `--plan` counts the suite
    runs a replay needs and runs none.
    """
    if not session.posargs:
        session.error("usage: nox -s history -- FAMILY=PATH_TO_GIT_REPO [--since DATE] [--until REV] [--plan]")
    _install(session)
    session.run("python", "-m", "harness.gate.history", *session.posargs)


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """Re-create each historic bug in impl/ and show its regression fails on it (killed/survived)."""
    _install(session)
    session.run("python", "-m", "harness.mutants", *session.posargs)


PEERS = ["skyrl==0.3.0"]
# Library peers whose token or hidden-state path runs on the CPU (bench/peers.py); ms-swift is left out
# unless LPH_MEGATRON_PATH names a Megatron-LM checkout.
PEERS += ["trl==1.16.0", "ms-swift==4.6.0"]


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """CPU speed (pytest-benchmark) and peak memory of impl/, donation, naive torch and installed peers.

    Writes reports/bench/speed.json, memory.json, memory.png and hidden.json (the hidden-state path
    beside torch's own linear_cross_entropy, time and peak on the same shapes). Peers are
    installed without their dependencies and loaded from the package at run
    time; one that cannot be installed is left out with a warning.
    """
    _install(session)
    session.install("matplotlib")
    for peer in PEERS:
        try:
            session.install("--no-deps", peer)
        except nox.command.CommandFailed:
            session.warn(f"peer {peer} could not be installed; benchmarking without it")
    raw = "reports/bench/raw-speed.json"
    Path(raw).parent.mkdir(parents=True, exist_ok=True)
    # the machine, its load and the revision, taken before the timings (harness.records renders it with them)
    session.run("python", "-m", "bench.about", "reports/bench", "nox -s bench")
    session.run("python", "-m", "pytest", "bench", f"--benchmark-json={raw}", *session.posargs)
    session.run("python", "-m", "bench.report", raw)
    session.run("python", "-m", "bench.memory_table")
    # The hidden-state path vs unfused, torch's linear_cross_entropy and SkyRL's fused path: reports/bench/hidden.json
    session.run("python", "-m", "bench.hidden_table")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The generated records (docs/records/): runs newer than their record under reports/ become its data, then
    every page is rendered again from the data and the registry (``python -m harness.records``; running it twice
    changes nothing). Arguments go to it (``--reports DIR``)."""
    _install(session)
    session.run("python", "-m", "harness.records", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


# Imported for what the GPU session needs: the machine's torch, plus these if that Python lacks them.
GPU_TEST_DEPS = {"pytest": "pytest>=8", "hypothesis": "hypothesis>=6.100"}
_GPU_PROBE = (
    "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())"
)


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """The suite on CUDA (LPH_DEVICE=cuda), real-memory calibration of the tracker, and the GPU bench: reports/gpu/.

    Runs in the interpreter nox itself runs under (``sys.executable``), with
    no virtualenv: GPU machines keep their CUDA torch in a venv or conda env
    of their own, and a new venv made with --system-site-packages from such
    an interpreter sees the BASE Python's site-packages, not the env's, so
    torch would vanish. Run nox with the Python that holds the CUDA torch
    (``/path/to/python -m nox -s gpu``). Nothing is downloaded: the project is
    put on PYTHONPATH; pytest and hypothesis, if that Python lacks them, are
    pip-installed into ``.nox/gpu-site`` (pip honours PIP_NO_INDEX /
    PIP_FIND_LINKS for a wheelhouse). Without CUDA it prints why and is
    skipped: exit 0.

    ``nox -s gpu -- --quick [--out DIR]``: instead, the prepared device run
    (``bench.gpu_quick``: five checks in order, each in its own time limit,
    about 8 minutes on an H100; reports/gpu/quick/); without CUDA, its CPU
    dry run.
    """
    quick = "--quick" in session.posargs
    python = sys.executable
    try:
        probe = session.run(python, "-c", _GPU_PROBE, silent=True, external=True)
    except nox.command.CommandFailed:
        session.skip(
            f"nox -s gpu: torch is not importable from {python}: skipped (run nox with the CUDA torch's Python)"
        )
    version, cuda, available, count = probe.strip().splitlines()[-1].split()
    if available != "True" and not quick:
        session.skip(f"nox -s gpu: no CUDA device (torch {version}, cuda {cuda}): skipped")
    session.log(f"nox -s gpu: {python}: torch {version}, CUDA {cuda}, {count} device(s)")

    root = Path(__file__).resolve().parent
    site = root / ".nox" / "gpu-site"
    session.env["PYTHONPATH"] = os.pathsep.join([str(root), str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    find_missing = f"import importlib.util as u; print(*[m for m in {list(GPU_TEST_DEPS)} if u.find_spec(m) is None])"
    missing = session.run(python, "-c", find_missing, silent=True, external=True).split()
    if missing:
        try:
            session.run(
                python,
                "-m",
                "pip",
                "install",
                "--target",
                str(site),
                *(GPU_TEST_DEPS[m] for m in missing),
                external=True,
            )
        except nox.command.CommandFailed:
            session.error(
                f"nox -s gpu: {missing} not importable from {python} and not installable here; install them into "
                "that Python, or point pip at a wheelhouse (PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheels)"
            )

    if quick:
        session.run(python, "-m", "bench.gpu_quick", *(a for a in session.posargs if a != "--quick"), external=True)
        return
    out = "reports/gpu"
    Path(out, "impl-triton").mkdir(parents=True, exist_ok=True)
    session.env["LPH_DEVICE"] = "cuda"
    triton_out = f"{out}/impl-triton"
    steps = {
        "suite on CUDA": ["pytest", "tests", *SUITE, f"--junitxml={out}/junit.xml", f"--report-dir={out}"],
        # The Triton backend compiled for the GPU (impl-triton: no interpreter, no case limits), same suite.
        "suite on CUDA, Triton backend": [
            "pytest",
            *SUITE,
            "--target",
            "impl-triton",
            f"--junitxml={triton_out}/junit.xml",
            f"--report-dir={triton_out}",
        ],
        "memory calibration": ["bench.gpu_calibration"],
        "GPU bench": ["bench.gpu_bench"],
    }
    session.run(python, "-m", "bench.about", out, "nox -s gpu", external=True)
    failed = []
    for name, args in steps.items():
        extra = list(session.posargs) if name.startswith("suite on CUDA") else []
        try:
            session.run(python, "-m", *args, *extra, external=True)
        except nox.command.CommandFailed:
            failed.append(name)
    if failed:
        session.error(f"nox -s gpu: failed: {', '.join(failed)} (see {out}/)")
