"""Before a run is classified: give the machine a second chance on what may have been its fault.

A gate that reads a loaded runner as a broken pull request gets switched off,
so two kinds of verdict are checked again before the gate decides:

* ERROR (``PoolStartError``: the rank pool could not start, already after
  one retry inside the pool; not a load ERROR, which would fail alike):
  the check is run once more on its own; its second verdict replaces the
  first, and one still ERROR stays ERROR (undecided, exit 3), never FAIL.
* a hang found as a Hypothesis counterexample is replayed alone on the same
  target (one subprocess for all of them). The hang-class bugs this harness
  exists for are deterministic (a rank that skips a collective skips it every
  time), so a hang that reproduces stays FAIL (hang); one whose replay passes
  was a deadline missed under load and becomes ERROR ("did not reproduce").
  A replay that fails differently keeps the FAIL, as the replay's failure
  (its kind and reason): the check failed either way, but the hang was the
  deadline's, and a hang kind that is really a crash under load would read,
  base against PR, as a failure that changed kind (seen replaying slime's
  history at load 40: a rank's in-place crash recorded as a hang on some
  revisions, blocking commits that changed nothing).
  A hang whose report shows a rank that FINISHED the job without joining the
  collective its peers waited in (the verdict's ``diverged`` fact) is not
  replayed: the ranks' collective sequences differed, which no load can
  cause, so it is reproduced by construction (and a replay would only wait
  out another deadline per hang: a hang-class bug must cost at most about twice a correct target).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from harness.checks import failure
from harness.gate.replays import REPLAY_TIMEOUT_S, replay_in_subprocess
from harness.gate.verdicts import ERROR, FAIL, HANG, PASS, Run


def confirm_hangs(run: Run, target: str, env: dict, *, replay=replay_in_subprocess) -> list[str]:
    """Replay ``run``'s replayable hangs on ``target``: passing ones become ERROR, ones failing otherwise take that
    failure. Returns the ids changed."""
    hangs = [
        v for v in run.checks().values() if v.outcome == FAIL and v.kind == HANG and v.replayable and not v.diverged
    ]
    if not hangs:
        return []
    results = replay([v.call for v in hangs], target, env, REPLAY_TIMEOUT_S)
    replayed = {r.call: r for r in results}
    changed = []
    for verdict in hangs:
        result = replayed.get(verdict.call)
        if (
            result is None
            or result.outcome not in (PASS, FAIL)
            or (result.outcome == FAIL and result.kind in (HANG, ""))
        ):
            continue
        if result.outcome == PASS:
            reason = f"hang did not reproduce when replayed alone (a deadline missed under load?): {verdict.reason}"
            run.verdicts[verdict.id] = replace(verdict, outcome=ERROR, reason=reason)
        else:
            reason = f"replayed alone it fails as {result.kind or 'a failure'}, not a hang: {result.reason}"
            run.verdicts[verdict.id] = replace(verdict, kind=result.kind, reason=reason, subtests=dict(result.subtests))
        changed.append(verdict.id)
    return changed


def rerun_errors(run: Run, rerun: Callable[[list[str]], Run]) -> list[str]:
    """Run the checks that ended in ERROR once more (``rerun(node ids)``); their new verdicts replace the old. Code
    that could not be loaded (``failure.LOAD``) is not the machine's doing: it would fail to load again."""
    errored = sorted(key for key, v in run.checks().items() if v.outcome == ERROR and v.kind != failure.LOAD)
    if not errored:
        return []
    again = rerun(errored)
    for key in errored:
        if key in again.verdicts:
            run.verdicts[key] = again.verdicts[key]
    return errored
