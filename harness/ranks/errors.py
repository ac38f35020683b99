"""What a failed distributed job becomes: RankError, RankHang, and the messages that name the ranks.

Split from ``harness.ranks.pool`` (which re-exports the exception classes) so that
the pool keeps to processes and pipes, and so that one place decides which
failures are of the hang class. The verdict table renders any ``RankHang``
(subclasses included) as "hang": a stuck job must read as a verdict on the
target, never as "the harness is broken".

A rank blocked in a collective whose peer never joins raises the backend's
own timeout once the job's collective timeout passes (gloo: "Timed out
waiting ... for recv operation"; NCCL: the watchdog's "collective operation
timeout"). That rank did not fail by itself, it waited for a peer that took
another path: the hang class of bugs. ``CollectiveHang`` is therefore
a ``RankHang`` naming the waiting rank(s) and their last collective, not a
``RankError``. A rank that raised a real exception while a peer waited stays
a ``RankError``: the exception is the cause, the wait only its consequence.
"""

from __future__ import annotations

import re

from harness.ranks.deadlock import group_of, proof_lines

GRACE_S = 2.0

# The backends' own words for "this collective waited past the group's timeout".
_COLLECTIVE_TIMEOUT = re.compile(
    r"Timed out waiting \d+ms for \w+ operation|Application timeout caused pair closure"
    r"|Watchdog caught collective operation timeout|collective operation timeout|DistBackendError.*[Tt]imeout"
)


# What a peer reports when a timed-out rank closed their pair (see ``hang_errors``).
_PEER_CLOSED = re.compile(r"Connection closed by peer")

# A CollectiveHang whose first line carries this proves the hang (see ``timeout_message``).
DIVERGED = "finished the job without joining it"


class RankError(RuntimeError):
    """One or more ranks raised or died while running a job (or starting)."""

    failure_kind = "error"  # harness.checks.failure.ERROR: read as data by the verdict, never from the text


class RankHang(RuntimeError):
    """One or more ranks did not finish a job (or start) before the deadline."""

    failure_kind = "hang"
    # True when a rank FINISHED the job without joining the collective its peers waited in (see
    # ``diverged_ranks``): the hang is reproduced by construction (harness/gate/retries.py).
    diverged = False


class PoolStartError(RuntimeError):
    """The rank pool could not be started (ranks died or were not ready in time), even after a retry.

    This is the machine's failure, not the target's: no job of the target ran.
    The gate reads it as ERROR (undecided), never as a FAIL of the check that
    happened to need the pool (docs/gate.md).
    """

    failure_kind = "pool_start"


class CollectivesDiffer(AssertionError):
    """The ranks of a group issued different collective sequences: no hang this time, but one in waiting (bug 5)."""

    failure_kind = "collectives"


class CollectiveHang(RankHang):
    """Ranks gave up waiting in a collective their peers never joined (the process group's timeout).

    Named ``...Hang`` so that reports that pick the first ``...Error`` /
    ``...Hang`` line of a failure show this line, not the backend's
    ``RuntimeError: Timed out waiting`` quoted further down.
    """


def is_collective_timeout(traceback_text: str) -> bool:
    """True when a rank's traceback ends in the backend's collective-timeout error."""
    lines = traceback_text.rstrip().splitlines()
    return bool(lines) and bool(_COLLECTIVE_TIMEOUT.search(lines[-1]))


def hang_errors(errors: dict) -> dict:
    """The ranks' errors that belong to a hang: collective timeouts, and pairs their timed-out peers closed.

    A rank that times out closes its gloo pairs, so a peer still blocked on
    that pair fails at once with "Connection closed by peer" instead of its
    own timeout: a consequence of the same hang, not an exception of its own
    (read as one, the same example was a RankError on one run and a
    CollectiveHang on the next, which Hypothesis reports as Flaky; seen on
    the Triton TP mutant). Only when some rank really timed out: a rank that
    died also closes its pairs, and then its death is the cause.
    """
    timed_out = {rank: text for rank, text in errors.items() if is_collective_timeout(text)}
    if timed_out:
        timed_out.update({rank: text for rank, text in errors.items() if _is_peer_closed(text)})
    return timed_out


def _is_peer_closed(traceback_text: str) -> bool:
    lines = traceback_text.rstrip().splitlines()
    return bool(lines) and bool(_PEER_CLOSED.search(lines[-1]))


def layout(world_size: int, fn: str, tp: int, cp: int) -> str:
    return f"job {fn} on a world of {world_size} (tp={tp}, cp={cp})"


def error_lines(errors: dict) -> str:
    return "\n".join(f"--- rank {rank} ---\n{text.rstrip()}" for rank, text in sorted(errors.items()))


def stuck_lines(stuck_at: dict) -> str:
    return "\n".join(f"rank {rank} stuck; last collective: {last}" for rank, last in stuck_at.items())


def error_message(where: str, errors: dict, stuck_at: dict) -> str:
    """RankError's text; the first line carries the first failing rank's exception (verdict tables show only it)."""
    real = [rank for rank, text in errors.items() if not is_collective_timeout(text)]
    first_rank = min(real or errors)
    lines = errors[first_rank].rstrip().splitlines()
    cause = f": rank {first_rank}: {lines[-1].strip()}" if lines else ""
    parts = [f"{where} failed on rank(s) {sorted(errors)}{cause}", error_lines(errors)]
    if stuck_at:
        parts += [
            f"the other rank(s) {sorted(stuck_at)} were still busy after a {GRACE_S:.0f} s grace:",
            stuck_lines(stuck_at),
            "the pool was killed and will respawn on the next job",
        ]
    return "\n".join(parts)


def hang_message(where: str, world_size: int, timeout_s: float, stuck_at: dict) -> str:
    """RankHang's text: which ranks are stuck, in which collective, which finished."""
    finished = sorted(set(range(world_size)) - set(stuck_at))
    return "\n".join(
        [
            f"{where} did not finish within {timeout_s:.1f} s",
            stuck_lines(stuck_at),
            f"finished: rank(s) {finished}",
            "the pool was killed and will respawn on the next job",
        ]
    )


def diverged_ranks(finished: list, timed_out: dict, last: dict) -> list[int]:
    """The ranks that finished the job although they belong to a group a timed-out rank was stuck in."""
    return sorted({rank for waiting in timed_out for rank in group_of(last[waiting]) if rank in finished})


def timeout_message(where: str, finished: list, timeout_s: float, timed_out: dict, last: dict, rejoined: bool) -> str:
    """CollectiveHang's text: the ranks that gave up waiting, their last collective, the backend's words.

    When a rank that FINISHED the job belongs to the group a waiting rank
    was stuck in, the first line says so (``DIVERGED``): the finished rank
    returned without ever issuing that collective, so the ranks' collective
    sequences differ, a hang whatever the deadline; a slow rank would have
    joined late and failed on the closed pairs, not finished. The gate takes
    such a hang as reproduced without replaying it (harness/gate/retries.py).
    The last line says whether the ranks re-joined fresh groups (``rejoined``)
    or the pool was killed (a GPU backend, or a re-join that failed).
    """
    waits = "\n".join(f"rank {rank} stuck; last collective: {last[rank]}" for rank in sorted(timed_out))
    skipped = diverged_ranks(finished, timed_out, last)
    if skipped:
        first = _diverged_line(where, sorted(timed_out), timeout_s, skipped)
    else:
        first = (
            f"{where}: rank(s) {sorted(timed_out)} waited {timeout_s:.1f} s in a collective their peers never "
            "joined (the process group's timeout)"
        )
    return "\n".join(
        [
            first,
            waits,
            f"finished: rank(s) {sorted(finished)}",
            error_lines(timed_out),
            "the ranks joined fresh process groups (no respawn)"
            if rejoined
            else "the pool was killed and will respawn on the next job",
        ]
    )


def proven_message(where: str, finished: list, waited_s: float, stranded: dict, stuck_at: dict) -> str:
    """CollectiveHang's text when the parent proved the hang before any timeout (``harness.ranks.deadlock``).

    The first line has ``timeout_message``'s diverged form, so the verdict's
    signature is the same whichever way the hang was found.
    """
    skipped = sorted({peer for proof in stranded.values() for peer, _ in proof.short})
    return "\n".join(
        [
            _diverged_line(where, sorted(stranded), waited_s, skipped),
            stuck_lines(stuck_at),
            f"finished: rank(s) {sorted(finished)}",
            *proof_lines(stranded),
            "proven before the deadline; the pool was killed and will respawn on the next job",
        ]
    )


def _diverged_line(where: str, waiting: list, waited_s: float, skipped: list) -> str:
    """The first line of a hang some finished rank proves (``DIVERGED``), timed out or proven before."""
    return (
        f"{where}: rank(s) {waiting} waited {waited_s:.1f} s in a collective that rank(s) "
        f"{skipped} {DIVERGED} (the ranks issued different collectives: a hang whatever the deadline)"
    )
