"""Replay counterexamples of one side of a comparison on the other side's target.

A derandomised run stops generating at its first failure, so a base and a PR
may draw different examples: a failure the PR's run found but the base's run
happened not to draw is still pre-existing if the base fails the same Case.
Each side's target may need its own environment (``LPH_SLIME_PATH`` for a
checkout), so the replays of one side run in ONE subprocess with that
environment (one rank pool, many Cases): ``python -m harness.gate.replays``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import ROOT
from harness.checks import failure

# One subprocess replaying a side's counterexamples: generous, a hang replay waits out its deadlines.
REPLAY_TIMEOUT_S = 900.0


@dataclass
class Replayed:
    check: str
    case: str
    outcome: str  # PASS, FAIL or UNSUPPORTED
    reason: str = ""
    kind: str = ""
    subtests: dict = field(default_factory=dict)  # of a FAIL: output -> PASS or FAIL entry with its signature
    options: str = ""  # the keywords the check was called with, as JSON (``Verdict.options``)

    @property
    def call(self) -> tuple[str, str, str]:
        return self.check, self.case, self.options

    def output(self, output: str) -> tuple[str, dict]:
        """(PASS / FAIL / MASKED / UNJUDGED, the FAIL entry) of one output in this replay."""
        if self.outcome == "PASS":
            return "PASS", {}
        if self.outcome != "FAIL":
            return self.outcome, {}
        entry = self.subtests.get(output)
        if entry is not None:
            return entry.get("outcome", "FAIL"), entry
        whole = self.subtests.get("", {})
        if output and whole.get("outcome") == "FAIL":
            return "MASKED", whole
        if not self.subtests and not output:
            return "FAIL", {"kind": self.kind, "headline": self.reason, "signature": {"kind": self.kind}}
        return "UNJUDGED", {}


def replay_one(check: str, case_json: str, target: str, options: str = "") -> Replayed:
    """Run ``check`` on the Case in this process, with the keywords ``options`` (JSON) it was called with; never
    raises."""
    from harness.cases.case import Case
    from harness.names import resolve

    try:
        function = resolve(check)
        function(Case.from_json(case_json), target, **(json.loads(options) if options else {}))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # the check's failure, whatever it raised (pytest's skip is a BaseException)
        facts = failure.facts_of(exc)
        if facts.kind == failure.UNSUPPORTED:
            return Replayed(check, case_json, "UNSUPPORTED", facts.headline, options=options)
        return Replayed(check, case_json, "FAIL", facts.headline, facts.kind, facts.subtests, options=options)
    return Replayed(check, case_json, "PASS", options=options)


def replay_in_subprocess(items: list[tuple[str, str, str]], target: str, env: dict, timeout_s: float) -> list[Replayed]:
    """Replay ``items`` (``Verdict.call``: check, Case JSON, options JSON) against ``target`` in a child with ``env``
    added."""
    if not items:
        return []
    with tempfile.TemporaryDirectory(prefix="lph-replay-") as tmp:
        source, result = Path(tmp) / "in.json", Path(tmp) / "out.json"
        source.write_text(json.dumps([{"check": c, "case": k, "options": o} for c, k, o in items]))
        command = [sys.executable, "-m", "harness.gate.replays", "--target", target, "--in", str(source)]
        command += ["--out", str(result)]
        child_env = {**os.environ, **env}
        try:
            subprocess.run(command, cwd=ROOT, env=child_env, timeout=timeout_s, check=True)
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as exc:
            reason = f"the replay process did not finish cleanly: {exc}"
            return [Replayed(c, k, "ERROR", reason, options=o) for c, k, o in items]
        return [Replayed(**entry) for entry in json.loads(result.read_text())]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.gate.replays", description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--in", dest="source", required=True, help="JSON list of {check, case, options}")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from harness.ranks.pool import shutdown_all

    items = json.loads(Path(args.source).read_text())
    try:
        results = [replay_one(item["check"], item["case"], args.target, item.get("options", "")) for item in items]
    finally:
        shutdown_all()
    Path(args.out).write_text(json.dumps([asdict(r) for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
