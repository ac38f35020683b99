"""A hang is a verdict, not something to shrink for minutes (issue 13).

Once an example of a test hangs (``RankHang`` or its ``CollectiveHang``),
each further hung example costs a deadline plus a pool respawn, and
Hypothesis' shrinker would replay dozens. Two bounds, reset per test by the
pytest plugin (``pytest_runtest_setup``):

* a memo of hung examples, keyed by (job, target, Case JSON, options): a
  replay of a known-hung example raises the same ``RankHang`` (same type,
  same message, raised from the same line) at once, without running. This
  also keeps Hypothesis' final replay of the reported example instant and
  consistent, so it is never reported Flaky;
* a shrink budget (``SHRINK_BUDGET_S`` after the first hang): once spent,
  NEW examples are rejected (Hypothesis ``reject()``) without running, so
  generation and shrinking stop and Hypothesis reports the best hung example
  found so far, with its Case and replay command (``harness.checks.parity``).
  The budget is 0: the first hung example is the one reported. Shrinking a
  hang means running smaller examples that almost all hang too, each
  waiting out a whole deadline, so any budget costs about one more deadline
  per property; measured on the hang mutant, a 10 s budget made each such
  property cost 24-35 s and the whole ``ci`` suite 2.45x a correct target's
  test time (docs/design.md, "Measured against the acceptance"). What a
  hang report needs is in its message anyway: the stuck rank, its last
  collective, the layout, the Case and the replay command.
  Jobs that already ran in this test are never rejected: Hypothesis replays
  its failing examples at the end (a check may run several jobs, and the
  failure may be another check's assertion), and rejecting a replay that
  once passed its assumptions is reported as Flaky.

Outside a Hypothesis test (a plain pytest test, ``harness.replay``) nothing
is rejected: only memo hits short-cut.
"""

from __future__ import annotations

import json
import time

from hypothesis import reject
from hypothesis.control import currently_in_test_context

from harness.ranks.errors import RankHang

SHRINK_BUDGET_S = 0.0


def memo_key(job: str, payload: dict) -> str:
    """(job, target, Case JSON, options): everything that decides what the ranks run."""
    return json.dumps([job, payload], sort_keys=True, default=repr)


class HangMemo:
    """Per-test memory of hung examples and of when the first hang was seen."""

    def __init__(self, budget_s: float = SHRINK_BUDGET_S):
        self.budget_s = budget_s
        self.reset()

    def reset(self) -> None:
        self.hung: dict[str, tuple[type, str]] = {}
        self.ran: set[str] = set()
        self.first_hang_at: float | None = None
        self.skipped_runs = 0
        self.rejected = 0

    @property
    def budget_spent(self) -> bool:
        return self.first_hang_at is not None and time.monotonic() - self.first_hang_at > self.budget_s

    def before_run(self, key: str) -> None:
        """Raise the memoised hang of ``key``; reject a new example once the budget is spent."""
        if key in self.hung:
            self.skipped_runs += 1
            kind, message = self.hung[key]
            raise_hang(kind, message, known=True)
        if key in self.ran:
            return  # ran before in this test and did not hang: Hypothesis' replays must see it run again
        if self.budget_spent and currently_in_test_context():
            self.rejected += 1
            reject()
        self.ran.add(key)

    def record(self, key: str, hang: RankHang) -> None:
        """Remember ``hang`` for ``key``; the first hang of the test starts the shrink budget."""
        self.hung[key] = (type(hang), str(hang))
        if self.first_hang_at is None:
            self.first_hang_at = time.monotonic()


def raise_hang(kind: type, message: str, known: bool = False) -> None:
    """The one place memoised and fresh hangs are raised from, so Hypothesis sees the same failure."""
    hang = kind(message)
    if known:
        hang.add_note("(this example hung earlier in this test: not run again; see harness/ranks/hang_memo.py)")
    raise hang


MEMO = HangMemo()


def reset() -> None:
    """Called before every test by the pytest plugin: hangs and budgets are per test."""
    MEMO.reset()
