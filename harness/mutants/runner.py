"""Run each mutant's regression tests in a fresh pytest process and report killed/survived/equivalent here.

A mutant is KILLED when pytest exits 1 with at least one check of its
regressions FAILED in the run's ``verdicts.json`` (read as data, never
scraped from pytest's output; a collection error or an internal error
proves nothing). The environment carries ``LPH_MUTANT`` into the subprocess
and, through spawn, into every rank it starts. A mutant with a probe
(harness/mutants/probes.py) is asked first whether its mutated operation
changes any bits on this machine; where it changes none the mutant is
EQUIVALENT HERE and is not run: no check can tell it from impl on this
machine, and that is a fact about the machine, not a survival.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

from harness import ROOT
from harness.gate.verdicts import FAIL, Run
from harness.mutants.catalog import MUTANTS, Mutant
from harness.mutants.loader import ENV_VAR
from harness.names import resolve


@dataclass
class MutantResult:
    mutant: Mutant
    returncode: int
    failed: list
    seconds: float
    output: str
    probe: object = None  # the ProbeResult, for a mutant with a probe

    @property
    def equivalent_here(self) -> bool:
        return self.probe is not None and not self.probe.detectable

    @property
    def killed(self) -> bool:
        return self.returncode == 1 and bool(self.failed)

    @property
    def verdict(self) -> str:
        if self.equivalent_here:
            return "equivalent here"
        return "killed" if self.killed else "SURVIVED"


def within(check_id: str, selection) -> bool:
    """Whether a failed check's node id is one of ``selection``'s files or checks (``file`` or ``file::test``)."""
    check = check_id.split("[")[0]
    return any(check == chosen or check.startswith(chosen + "::") for chosen in selection)


def run_mutant(mutant: Mutant, extra_args=()) -> MutantResult:
    probe = resolve(mutant.probe)() if mutant.probe else None
    if probe is not None and not probe.detectable:
        return MutantResult(mutant, 0, [], 0.0, f"equivalent here: {probe}", probe)
    env = dict(os.environ, **{ENV_VAR: mutant.name})
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
    # Whether the regression kills the mutant is its verdict alone; the diagnosis's ablation (up to 20 s per failing
    # check, harness/checks/diagnosis.py) says which conditions a failure needs, which this run does not read.
    env.setdefault("LPH_ABLATION", "0")
    command = [
        sys.executable,
        "-m",
        "pytest",
        *mutant.killed_by,
        "--target",
        mutant.target,
        "-q",
        "-rf",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        *extra_args,
    ]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lph-mutant-") as reports:
        proc = subprocess.run([*command, f"--report-dir={reports}"], cwd=ROOT, env=env, capture_output=True, text=True)
        try:
            verdicts = Run.load(reports).verdicts.values()
        except FileNotFoundError:  # pytest never reached its summary: nothing was decided
            verdicts = []
    output = proc.stdout + proc.stderr
    failed = sorted(v.id for v in verdicts if v.outcome == FAIL)
    return MutantResult(mutant, proc.returncode, failed, time.monotonic() - start, output, probe)


def main(argv=None) -> int:
    names = set(argv if argv is not None else sys.argv[1:])
    selected = [m for m in MUTANTS if not names or m.name in names]
    verdicts = Counter()
    print(f"{'mutant':42} {'target':12} {'verdict':15} {'seconds':>7}  failing regressions")
    for mutant in selected:
        result = run_mutant(mutant)
        verdicts[result.verdict] += 1
        failed = ", ".join(result.failed) or (str(result.probe) if result.equivalent_here else "-")
        print(f"{mutant.name:42} {mutant.target:12} {result.verdict:15} {result.seconds:7.1f}  {failed}")
        if result.verdict == "SURVIVED":
            print(result.output[-4000:])
    print(", ".join(f"{verdicts[v]} {v}" for v in ("killed", "equivalent here", "SURVIVED")))
    return 1 if verdicts["SURVIVED"] else 0


if __name__ == "__main__":
    sys.exit(main())
