"""Job deadlines that follow the job's measured cost, so a hang-class bug costs seconds.

A small generated Case's job runs in milliseconds, yet a fixed 60 s deadline
made every example that reproduces a hang-class bug (docs/bugs.md #5) wait 60 s,
and Hypothesis' shrinker replays many: one such bug pushed the ``ci`` suite
from 114 s to 34 min. So the deadline of a job is a multiple of what the
same job SHAPE costs on this machine, measured on its successful runs:

    deadline = clamp(MULTIPLIER x slowest observed, FLOOR_S, CEILING_S)

* shape = (job function, tp, cp, size bucket); the bucket is the order of
  magnitude (powers of 8) of ``rows x vocab``, so a bigger Case does not
  inherit a small one's deadline;
* the slowest run, not the mean: a deadline must cover the worst normal run
  (first jobs after a respawn pay imports; other processes share the CPU);
* before a shape is observed: MULTIPLIER x the slowest run of the same job
  function (any layout; a smaller size bucket scaled up by 8 per bucket),
  or of any job if that function never ran, times UNSEEN_SHAPE_FACTOR, but
  at most COLD_S;
  before anything is observed, COLD_S (the very first job of a process);
* only jobs on a WARM pool are recorded (harness/ranks/run.py): the first job
  after a (re)spawn pays the ranks' imports, which would inflate the
  estimate of every later job by the cost of one cold start;
* the floor is deliberately generous: 2 cores running several 4-rank pools
  (three test sessions at once) can stretch a 30 ms job to seconds, and a
  false hang is worse than a slow report; it is scaled by the machine's
  current load per core (``contention``), so a crowded machine waits longer
  instead of reporting healthy jobs as hangs. The ceiling is the old fixed
  60 s, unless the scaled floor is above it.

The pool hands the deadline to every rank as its process groups' timeout,
so a rank blocked in a collective raises by itself (harness/ranks/pool.py).
``LPH_DEADLINE_FLOOR_S`` raises the floor for slow machines (e.g. many
xdist workers sharing a GPU box); it never lowers the ceiling.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

FLOOR_S = 8.0
CEILING_S = 60.0
COLD_S = 15.0
MULTIPLIER = 10.0
UNSEEN_SHAPE_FACTOR = 4.0


def shape_of(job: str, tp: int, cp: int, rows: int, vocab: int) -> tuple:
    """The key durations are recorded under: job, layout, and the order of magnitude of the work."""
    work = max(1, rows * vocab)
    return (job, tp, cp, (work.bit_length() - 1) // 3)


def contention() -> float:
    """How oversubscribed the CPUs are right now (1-minute load per core, at least 1).

    A job's cost on a shared machine follows the load: the same 30 ms job took
    seconds while other suites ran beside it, and an 8 s floor then turned a
    healthy job into a false hang (seen replaying slime's history beside two
    other suites). The floor scales with this factor; on a quiet machine it is 1.
    """
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def floor_s() -> float:
    base = max(FLOOR_S, float(os.environ.get("LPH_DEADLINE_FLOOR_S", FLOOR_S)))
    return base * contention()


@dataclass
class DeadlinePolicy:
    """Slowest successful duration per shape, and the deadline it implies."""

    slowest: dict = field(default_factory=dict)

    def observe(self, shape: tuple, seconds: float) -> None:
        """Record a SUCCESSFUL job's wall time (failed jobs say nothing about the normal cost)."""
        self.slowest[shape] = max(seconds, self.slowest.get(shape, 0.0))

    def deadline(self, shape: tuple) -> float:
        floor = floor_s()
        if shape in self.slowest:
            estimate = MULTIPLIER * self.slowest[shape]
        elif self.slowest:
            estimate = min(COLD_S, MULTIPLIER * UNSEEN_SHAPE_FACTOR * self._kin_estimate(shape))
        else:
            estimate = COLD_S
        return min(max(estimate, floor), max(CEILING_S, floor))

    def _kin_estimate(self, shape: tuple) -> float:
        """For an unseen shape: the slowest run of the SAME job (any layout), scaled up to its size bucket.

        A run of a smaller bucket is scaled by 8 per bucket (the bucket is the
        order of magnitude of the work). If this function never ran yet: the
        slowest job of any function. Taking the slowest of EVERY job made one
        slow hidden-state job set every unseen shape's deadline to the cold
        cap, and a hang-class bug whose first example hangs then waited 15 s
        per property (measured on ``tp_rank_without_targets_skips_stats_gather``).
        """
        job, _, _, bucket = shape
        kin = [seconds * 8.0 ** max(0, bucket - b) for (j, _, _, b), seconds in self.slowest.items() if j == job]
        return max(kin) if kin else max(self.slowest.values())


POLICY = DeadlinePolicy()
