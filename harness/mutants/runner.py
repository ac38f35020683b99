"""Run each mutant's regression tests in a fresh pytest process and report killed/survived.

A mutant is KILLED when pytest exits 1 with at least one check of its
regressions FAILED in the run's ``verdicts.json`` (read as data, never
scraped from pytest's output; a collection error or an internal error
proves nothing). The environment carries ``LPH_MUTANT`` into the subprocess
and, through spawn, into every rank it starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from harness import ROOT
from harness.gate.verdicts import FAIL, Run
from harness.mutants.catalog import MUTANTS, Mutant
from harness.mutants.loader import ENV_VAR


@dataclass
class MutantResult:
    mutant: Mutant
    returncode: int
    failed: list
    seconds: float
    output: str

    @property
    def killed(self) -> bool:
        return self.returncode == 1 and bool(self.failed)


def run_mutant(mutant: Mutant, extra_args=()) -> MutantResult:
    env = dict(os.environ, **{ENV_VAR: mutant.name})
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
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
    return MutantResult(mutant, proc.returncode, failed, time.monotonic() - start, output)


def main(argv=None) -> int:
    names = set(argv if argv is not None else sys.argv[1:])
    selected = [m for m in MUTANTS if not names or m.name in names]
    survived = 0
    print(f"{'mutant':42} {'target':12} {'verdict':9} {'seconds':>7}  failing regressions")
    for mutant in selected:
        result = run_mutant(mutant)
        verdict = "killed" if result.killed else "SURVIVED"
        survived += not result.killed
        failed = ", ".join(result.failed) or "-"
        print(f"{mutant.name:42} {mutant.target:12} {verdict:9} {result.seconds:7.1f}  {failed}")
        if not result.killed:
            print(result.output[-4000:])
    print(f"{len(selected) - survived} killed, {survived} survived")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
