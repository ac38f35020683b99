"""A failure's signature: what makes two failures of one output the same failure.

A gate that compares failures by kind alone reads two different errors on
the same check (two exception types, a wrong value of another size) as the
same known failure. The signature of one output's failure is:

* ``kind``: how it failed (``harness.checks.failure``);
* ``exception``: the exception's type name;
* ``message``: its first line with every number, path and address masked
  (``rank 1: ... got 5 expected 6`` and ``rank 0: ... got 4 expected 6``
  are one message class, ``... incorrect number of gradients`` and
  ``... modified by an inplace operation`` are two);
* ``magnitude``: the error's size against the reference's, from the
  tolerance figures: ``non-finite`` (NaN or an infinity where the reference
  is finite), ``large`` (at least ``LARGE`` of the reference's magnitude),
  ``small``; empty where no error was measured (an exception, a flag);
* ``needs`` / ``independent``: the conditions the diagnosis found the failure
  needs, and those it found it independent of (``harness.checks.diagnosis``),
  by dimension (``tp``, ``dtype``, ``kl_coef``, ...).

A failure MATCHES the one it is compared with (an expectation's, the base's)
when kind, exception and message are equal and it is no WORSE. An exception
a rank raised is compared as that exception (``cause``): the same error read
once through a rank (``RankError``, its message the job, the failing ranks,
then the rank's exception, cut at ``MESSAGE_CHARS``) and once in process, or
through jobs of two world sizes (their rank lists, so their cuts, differ), is
one failure, and a message cut short matches the whole one it begins. It is
no worse when its magnitude is no larger (``small`` < ``large`` <
``non-finite``) and it is independent of no condition the other failure
needed (it would then fail where the other passed: wider). A failure that needs MORE conditions than
the other (the base failed in fp32 and bf16, the PR in bf16 only), or whose
error shrank, is the same failure, narrowed: a partial fix is not a new
failure (TransformerEngine 2.8 narrowed 2.7's gradient defect to bf16 this
way). A condition one side could not decide (its ablation budget spent on a
loaded machine) never makes a difference. An expectation records the
signature it expects; a field it leaves empty accepts anything.
"""

from __future__ import annotations

import math
import re

LARGE = 0.1
HANG = "hang"  # harness.checks.failure.HANG (that module imports this one)
MAGNITUDES = ("", "small", "large", "non-finite")  # from no measured error to the worst
FIELDS = ("kind", "exception", "message", "magnitude", "needs", "independent")
_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:/[^\s:'\"(),]+){2,}"), "<path>"),
    (re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf|-inf)\b"), "#"),
)
MESSAGE_CHARS = 160
# A RankError's message class (harness/ranks/errors.py error_message): the job, the failing ranks, then the first
# failing rank's last traceback line, which is ``Type: message`` when the rank raised (not when it was killed).
_RANK_CAUSE = re.compile(r"^job .* failed on rank\(s\) \[[#, ]*\]: rank #: ([A-Za-z_][\w.]*): (.*)$")
SHORTEST_CUT = 40  # a cut message shorter than this says too little to match a longer one by its beginning


def message_class(headline: str) -> str:
    """The headline (``Type: first line``) without its type, numbers, paths and addresses masked."""
    text = headline.partition(": ")[2] if ": " in headline else headline
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text.strip()[:MESSAGE_CHARS]


def magnitude_class(figures: dict) -> str:
    """``non-finite`` / ``large`` / ``small`` from a comparison's figures; empty without a measured error."""
    error = figures.get("max_error")
    if not isinstance(error, (int, float)):
        return ""
    if not math.isfinite(error):
        return "non-finite"
    reference = figures.get("reference", 0.0)
    scale = max(float(reference) if isinstance(reference, (int, float)) else 0.0, float(figures.get("bound", 0.0)))
    if scale <= 0.0:
        return "large" if error > 0 else "small"
    return "large" if error >= LARGE * scale else "small"


def of(entry: dict, conditions: dict | None = None) -> dict:
    """The signature of one output's FAIL entry (``harness.checks.subtests.sub_facts``); ``conditions`` is that
    output's diagnosis (``{"needs": [...], "independent_of": [...]}``), if any."""
    headline = entry.get("headline", "")
    conditions = conditions or {}
    return {
        "kind": entry.get("kind", ""),
        "exception": headline.partition(": ")[0] if headline else "",
        "message": message_class(headline),
        "magnitude": magnitude_class(entry.get("figures", {})),
        "needs": sorted(conditions.get("needs_dimensions", [])),
        "independent": sorted(conditions.get("independent_of", [])),
    }


def cause(fields: dict) -> tuple[str, str]:
    """(exception, message) of the error itself: a rank's exception rather than the RankError that carried it."""
    exception, message = fields.get("exception", ""), fields.get("message", "")
    carried = _RANK_CAUSE.match(message) if exception == "RankError" else None
    return (carried.group(1), carried.group(2)) if carried else (exception, message)


def _same_message(expected: str, found: str) -> bool:
    """Equal, or one is the other cut at ``MESSAGE_CHARS`` (a RankError's prefix leaves its cause less room)."""
    if expected == found:
        return True
    shorter, longer = sorted((expected, found), key=len)
    return len(shorter) >= SHORTEST_CUT and longer.startswith(shorter)


def _differs(name: str, expected: dict, found: dict) -> bool:
    """Whether ``found`` differs from ``expected`` in the field ``name`` (a field ``expected`` leaves empty accepts
    anything); exception and message are compared by their cause."""
    if not expected.get(name):
        return False
    if name == "exception":  # an expectation naming RankError alone still accepts whatever a rank raised
        return found.get(name) != expected[name] and cause(found)[0] != cause(expected)[0]
    if name == "message":
        return not _same_message(cause(expected)[1], cause(found)[1])
    return found.get(name) != expected[name]


def _compared(expected: dict, found: dict) -> tuple[str, ...]:
    """The fields two failures must share. Two hangs are one failure whichever detector fired first: the parent's
    deadline (``RankHang``) or a rank seen finishing without joining its peers' collective (``CollectiveHang``)
    races with the load, and the same hang read once each way is no new failure."""
    if expected.get("kind") == found.get("kind") == HANG:
        return ("kind",)
    return ("kind", "exception", "message")


def matches(expected: dict, found: dict) -> bool:
    """``found`` is the failure ``expected`` describes, or a narrower one (fields ``expected`` leaves empty accept
    anything)."""
    if any(_differs(name, expected, found) for name in _compared(expected, found)):
        return False
    if expected.get("magnitude") and _rank(found.get("magnitude", "")) > _rank(expected["magnitude"]):
        return False
    return not widened(expected, found)


def _rank(magnitude: str) -> int:
    return MAGNITUDES.index(magnitude) if magnitude in MAGNITUDES else len(MAGNITUDES)


def widened(before: dict, after: dict) -> list[str]:
    """Dimensions ``before`` needed that ``after`` is independent of: ``after`` fails where ``before`` passed."""
    return sorted(set(before.get("needs", ())) & set(after.get("independent", ())))


def narrowed(before: dict, after: dict) -> list[str]:
    """Dimensions ``before`` was independent of that ``after`` needs: ``after`` passes where ``before`` failed."""
    return widened(after, before)


def differences(expected: dict, found: dict) -> str:
    """What differs, for a reason line: ``exception CheckFailure -> RankError; magnitude small -> large``."""
    parts = [
        f"{name} {expected.get(name) or '-'} -> {found.get(name) or '-'}"
        for name in _compared(expected, found)
        if _differs(name, expected, found)
    ]
    if expected.get("magnitude") and found.get("magnitude") != expected["magnitude"]:
        parts.append(f"magnitude {expected['magnitude']} -> {found.get('magnitude') or '-'}")
    if widened(expected, found):
        parts.append(f"now fails without {', '.join(widened(expected, found))}")
    if narrowed(expected, found):
        parts.append(f"now needs {', '.join(narrowed(expected, found))}")
    return "; ".join(parts)
