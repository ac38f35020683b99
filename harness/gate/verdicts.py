"""The raw verdict of one check, and the ``verdicts.json`` of one run.

The pytest plugin writes a run's verdicts (outcome, tier, the failure's
facts: its kind, the shrunk Case, the check that replays it, measured
figures, the capabilities an UNSUPPORTED check lacked, and the outcome of each
output the check judged, ``subtests``: output -> PASS, or FAIL with its kind,
headline, figures and signature); the gate reads them
as fields, never from message text (``harness/checks/failure.py``). Raw
outcomes are PASS, FAIL, ERROR, UNSUPPORTED and SKIPPED; a FAIL's ``kind``
says how it failed (``value``, ``gradient``, ``hang``, ...). ERROR is a
check the machine could not decide (the rank pool did not start, a hang
that did not reproduce when replayed): it is retried by the gate and never
counted as the target's failure (docs/gate.md, "Infrastructure errors").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.checks.failure import HANG

PASS, FAIL, ERROR, UNSUPPORTED, SKIPPED = "PASS", "FAIL", "ERROR", "UNSUPPORTED", "SKIPPED"
VERDICTS_FILE = "verdicts.json"
__all__ = ["ERROR", "FAIL", "HANG", "PASS", "SKIPPED", "UNSUPPORTED", "VERDICTS_FILE", "Run", "Verdict"]


@dataclass
class Verdict:
    """One check's raw verdict (see the module docstring)."""

    id: str
    outcome: str
    tier: str
    reason: str = ""  # one line for people: the exception's type and first line (never parsed)
    kind: str = ""  # of a FAIL: harness.checks.failure's kinds
    check: str = ""  # module:function of the replayable check
    case: str = ""  # the shrunk Case as JSON
    options: str = ""  # the keywords the test passed to the check, as JSON ("" for none)
    replay: str = ""  # the command that reruns it
    figures: dict = field(default_factory=dict)
    missing: list = field(default_factory=list)  # of an UNSUPPORTED: the capabilities the target lacked
    diverged: bool = False  # of a hang: a rank finished without joining its peers' collective
    diagnosis: dict = field(default_factory=dict)  # of a FAIL: the conditions it needs (harness/checks/diagnosis.py)
    warnings: list = field(default_factory=list)  # of a FAIL: warnings the ranks raised during it
    subtests: dict = field(default_factory=dict)  # output -> {"outcome", ...} (harness/checks/subtests.py)

    @property
    def failed(self) -> bool:
        return self.outcome == FAIL

    @property
    def diagnosis_summary(self) -> str:
        """One line: which conditions the failure needs (harness/checks/diagnosis.py); empty without a diagnosis."""
        return self.diagnosis.get("summary", "") if self.diagnosis else ""

    @property
    def detail(self) -> str:
        """The reason, with the diagnosis when there is one."""
        summary = self.diagnosis_summary
        return f"{self.reason} [diagnosis: {summary}]" if summary else self.reason

    @property
    def call(self) -> tuple[str, str, str]:
        """What a replay reruns: the check, the Case, the keywords the test passed it."""
        return self.check, self.case, self.options

    @property
    def replayable(self) -> bool:
        """A Hypothesis counterexample that ``harness.replay`` can rerun on another target."""
        return bool(self.check and self.case)


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
