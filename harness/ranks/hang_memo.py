"""A hang is a verdict, not something to shrink for minutes.

Once an example of a test hangs (``RankHang`` or its ``CollectiveHang``),
each further hung example costs a deadline plus a pool re-join, and
Hypothesis' shrinker would replay dozens. So, per test (the pytest plugin
gives each test item a fresh ``HangMemo`` and makes it current):

* a memo of hung examples, keyed by (job, target, Case JSON, options): a
  replay of a known-hung example raises the same ``RankHang`` (same type,
  same message, raised from the same line) at once, without running. This
  also keeps Hypothesis' final replay of the reported example instant and
  consistent, so it is never reported Flaky;
* no shrinking of a hang: once an example hung, NEW examples are rejected
  (Hypothesis ``reject()``) without running, so generation and shrinking
  stop and Hypothesis reports the first hung example, with its Case and
  replay command. Shrinking a hang means running smaller examples that
  almost all hang too, each waiting out a whole deadline; measured on the
  hang mutant, a 10 s shrink budget made each such property cost 24-35 s
  and the whole ``ci`` suite 2.45x a correct target's test time
  (docs/design.md). What a hang report needs is in its message anyway: the
  stuck rank, its last collective, the layout, the Case and the replay.
  Jobs that already ran in this test are never rejected: Hypothesis replays
  its failing examples at the end (a check may run several jobs, and the
  failure may be another check's assertion), and rejecting a replay that
  once passed its assumptions is reported as Flaky.

Outside a Hypothesis test (a plain pytest test, ``harness.replay``) nothing
is rejected: only memo hits short-cut.
"""

from __future__ import annotations

import json
from contextvars import ContextVar, Token

from hypothesis import reject
from hypothesis.control import currently_in_test_context

from harness.ranks.errors import RankHang


def memo_key(job: str, payload: dict) -> str:
    """(job, target, Case JSON, options): everything that decides what the ranks run."""
    return json.dumps([job, payload], sort_keys=True, default=repr)


class HangMemo:
    """One test's memory of its hung examples."""

    def __init__(self):
        self.hung: dict[str, tuple[type, str, bool]] = {}
        self.ran: set[str] = set()
        self.skipped_runs = 0  # memo hits: examples answered without running

    def before_run(self, key: str) -> None:
        """Raise the memoised hang of ``key``; reject a new example once this test has hung."""
        if key in self.hung:
            self.skipped_runs += 1
            kind, message, diverged = self.hung[key]
            raise_hang(kind, message, known=True, diverged=diverged)
        if key in self.ran:
            return  # ran before in this test and did not hang: Hypothesis' replays must see it run again
        if self.hung and currently_in_test_context():
            reject()
        self.ran.add(key)

    def record(self, key: str, hang: RankHang) -> None:
        self.hung[key] = (type(hang), str(hang), hang.diverged)


def raise_hang(kind: type, message: str, known: bool = False, diverged: bool = False) -> None:
    """The one place memoised and fresh hangs are raised from, so Hypothesis sees the same failure."""
    hang = kind(message)
    hang.diverged = diverged
    if known:
        hang.add_note("(this example hung earlier in this test: not run again; see harness/ranks/hang_memo.py)")
    raise hang


_CURRENT: ContextVar[HangMemo | None] = ContextVar("lph_hang_memo", default=None)


def current() -> HangMemo:
    """The running test's memo (outside pytest: one memo for the process)."""
    memo = _CURRENT.get()
    if memo is None:
        memo = HangMemo()
        _CURRENT.set(memo)
    return memo


def use(memo: HangMemo) -> Token:
    """Make ``memo`` the running test's memo (the plugin calls this before each test)."""
    return _CURRENT.set(memo)
