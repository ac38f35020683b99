"""What a suite run had decided, and which check it was in, should the process die under it.

A target can kill the pytest process itself: Liger's fused kernel reads past the
end of a targets tensor that is too short, a segmentation fault under Triton's
CPU interpreter, in a one-rank check that runs in the test process. Every
verdict not yet written would go down with it, and one bad-input row would cost
the whole suite. So, with ``--report-dir``, the pytest plugin appends a line
here when a check starts and one when its verdict is decided; the gate
(``harness.gate.runner``) turns a run that died into the verdicts it had
decided, a FAIL of kind ``crash`` for the check it was in, and a rerun of the
rest without them. Each pytest run starts its journal empty (the gate gathers
a rerun's passes itself), so a report directory reused by hand never mixes
runs.

One JSON object per line, appended and closed each time (a line written before
the crash is on disk after it): ``{"started": id, "tier": tier}`` or
``{"verdict": {...}}``.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict
from pathlib import Path

from harness.checks.failure import CRASH
from harness.gate.verdicts import FAIL, Verdict
from harness.names import replay_environment

JOURNAL_FILE = "journal.jsonl"


def _append(directory: Path, entry: dict) -> None:
    with open(Path(directory) / JOURNAL_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def started(directory: Path, nodeid: str, tier: str) -> None:
    _append(directory, {"started": nodeid, "tier": tier})


def decided(directory: Path, verdict: Verdict) -> None:
    _append(directory, {"verdict": asdict(verdict)})


def clear(directory: Path) -> None:
    (Path(directory) / JOURNAL_FILE).unlink(missing_ok=True)


def read(directory: Path) -> tuple[dict[str, Verdict], tuple[str, str] | None]:
    """(every verdict decided, by id; the ``(id, tier)`` of the check started last if it has none, else None)."""
    path = Path(directory) / JOURNAL_FILE
    decided_verdicts: dict[str, Verdict] = {}
    running = None
    if not path.is_file():
        return decided_verdicts, None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by the crash itself
            continue
        if "started" in entry:
            running = (entry["started"], entry["tier"])
        elif "verdict" in entry:
            verdict = Verdict(**entry["verdict"])
            decided_verdicts[verdict.id] = verdict
    if running is not None and running[0] in decided_verdicts:
        running = None
    return decided_verdicts, running


def exit_description(code: int) -> str:
    """``SIGSEGV`` for a process a signal killed (negative return code), else ``exit N``."""
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def crash_verdict(nodeid: str, tier: str, code: int, target: str, env: dict) -> Verdict:
    """The check the process died in: a FAIL of kind ``crash`` (the target never returned, nor raised)."""
    how = exit_description(code)
    return Verdict(
        nodeid,
        FAIL,
        tier,
        reason=f"the test process died ({how}) inside this check: the target crashed it, neither returning nor raising",
        kind=CRASH,
        replay=f"{replay_environment(env)}python -m pytest '{nodeid}' --target {target}",
    )
