"""Wall time from the first failing example to the report, per injected failure class (hangs included).

Runs one property (the CP/TP policy-loss parity, which meets every layout)
under the ``ci`` profile against each adapter of
``tests/fakes/failure_targets.py``: wrong value, wrong gradient, an
exception on rank 1, rank 1 killed, a hang in forward, a hang in backward.
The adapter stamps the time of its first injected failure; the script
measures from it to pytest's exit, and reports the verdict's first line.

    python -m bench.failure_timing            # table on stdout, reports/bench/failure_timing.json

Timings depend on the machine's load (other pytest sessions on the same
cores stretch respawns); they are measured here, never asserted by tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROPERTY = "properties/test_backward_parity.py::test_policy_loss_parity"
CLASSES = {
    "wrong value": "WrongValue",
    "wrong gradient": "WrongGradient",
    "exception on one rank": "RaiseOnRank1",
    "rank killed": "KillRank1",
    "hang in forward": "HangForward",
    "hang in backward": "HangBackward",
}


def time_class(adapter: str) -> dict:
    stamp = Path(tempfile.mkdtemp(prefix="lph-stamp-")) / "first_failure"
    env = dict(os.environ, CI="true", LPH_FAILURE_STAMP=str(stamp))
    env.pop("HYPOTHESIS_PROFILE", None)
    target = f"tests/fakes/failure_targets.py:{adapter}"
    started = time.time()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", PROPERTY, "--target", target, "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    ended = time.time()
    first = float(stamp.read_text()) if stamp.exists() else None
    # The plugin's verdict table (harness.gate.render.terminal_lines): "FAIL (hang)   [tier] id" then the reason.
    verdict = re.search(r"^(?:FAIL(?: \(hang\))?|PASS)\s+\[[\w-]+\] \S+\n\s+(.*)$", run.stdout, re.MULTILINE)
    return {
        "adapter": adapter,
        "exit": run.returncode,
        "total_s": round(ended - started, 1),
        "first_failure_to_report_s": None if first is None else round(ended - first, 1),
        "verdict": (verdict.group(1)[:160] if verdict else run.stdout.strip().splitlines()[-1:]),
    }


def main() -> None:
    rows = {name: time_class(adapter) for name, adapter in CLASSES.items()}
    out = ROOT / "reports" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "failure_timing.json").write_text(json.dumps(rows, indent=2))
    print("| failure class | first failing example -> report | whole property | exit | verdict |")
    print("|---|---|---|---|---|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['first_failure_to_report_s']} s | {row['total_s']} s | {row['exit']} | "
            f"`{row['verdict']}` |"
        )


if __name__ == "__main__":
    main()
