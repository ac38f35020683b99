"""The raw verdict of one check, and the ``verdicts.json`` of one run.

The pytest plugin writes a run's verdicts (outcome, tier, first error line,
the shrunk Case and the check that replays it, measured figures); the gate
reads them. Raw outcomes are PASS, FAIL, ERROR, UNSUPPORTED and SKIPPED; a FAIL whose
exception is the rank pool's ``RankHang`` has ``kind == "hang"``. ERROR is
a check the machine could not decide (the rank pool did not start, a hang
that did not reproduce when replayed): it is retried by the gate and never
counted as the target's failure (docs/gate.md, "Infrastructure errors").
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, FAIL, ERROR, UNSUPPORTED, SKIPPED = "PASS", "FAIL", "ERROR", "UNSUPPORTED", "SKIPPED"
HANG = "hang"
VERDICTS_FILE = "verdicts.json"

_HANG = re.compile(r"^(?:\w+\.)*(?:RankHang|CollectiveHang)\b")
_INFRASTRUCTURE = re.compile(r"^(?:\w+\.)*PoolStartError\b")
_REPLAY = re.compile(r"python -m harness\.replay (\S+) --target (\S+) --case '(.*)'$")
_MISSING = re.compile(r"does not support \[([^\]]*)\]")


@dataclass
class Verdict:
    """One check's raw verdict (see the module docstring)."""

    id: str
    outcome: str
    tier: str
    reason: str = ""
    kind: str = ""
    check: str = ""
    case: str = ""
    replay: str = ""
    figures: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.outcome == FAIL

    @property
    def replayable(self) -> bool:
        """A Hypothesis counterexample that ``harness.replay`` can rerun on another target."""
        return bool(self.check and self.case)

    @property
    def missing_capabilities(self) -> tuple[str, ...]:
        """For an UNSUPPORTED verdict: the capabilities the target lacked."""
        match = _MISSING.search(self.reason)
        if not match:
            return ()
        return tuple(sorted(part.strip().strip("'\"") for part in match.group(1).split(",") if part.strip()))

    @property
    def short_reason(self) -> str:
        return self.reason.split(" Case: ", 1)[0]


def failure_kind(reason: str) -> str:
    return HANG if _HANG.match(reason) else ""


def is_infrastructure(reason: str) -> bool:
    """The failure is the machine's (the rank pool could not start), not the target's: an ERROR verdict."""
    return bool(_INFRASTRUCTURE.match(reason))


def split_replay(command: str) -> tuple[str, str]:
    """``python -m harness.replay CHECK --target T --case 'JSON'`` -> (CHECK, JSON); ("", "") otherwise."""
    match = _REPLAY.search(command or "")
    return (match.group(1), match.group(3)) if match else ("", "")


@dataclass
class Run:
    """The verdicts of one pytest run against one target."""

    target: str
    verdicts: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def checks(self) -> dict:
        """Only the checks (properties and regressions), not the harness's self-tests."""
        from harness.gate.tiers import TIERS

        return {key: v for key, v in self.verdicts.items() if v.tier in TIERS}

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / VERDICTS_FILE
        body = {"target": self.target, "meta": self.meta, "verdicts": [asdict(v) for v in self.verdicts.values()]}
        path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, path: Path) -> Run:
        path = Path(path)
        if path.is_dir():
            path = path / VERDICTS_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no verdicts (run the suite with --report-dir first)")
        body = json.loads(path.read_text())
        verdicts = {v["id"]: Verdict(**v) for v in body["verdicts"]}
        return cls(target=body["target"], verdicts=verdicts, meta=body.get("meta", {}))
