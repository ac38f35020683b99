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

Two signatures MATCH when kind, exception, message and magnitude are equal
and the conditions do not contradict (no dimension needed on one side and
found independent on the other): a condition one side could not decide (its
ablation budget spent on a loaded machine) never makes a difference. An
expectation records the signature it expects; a field it leaves empty
accepts anything.
"""

from __future__ import annotations

import math
import re

LARGE = 0.1
FIELDS = ("kind", "exception", "message", "magnitude", "needs", "independent")
_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:/[^\s:'\"(),]+){2,}"), "<path>"),
    (re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf|-inf)\b"), "#"),
)
MESSAGE_CHARS = 160


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


def matches(expected: dict, found: dict) -> bool:
    """``found`` is the failure ``expected`` describes (fields ``expected`` leaves empty accept anything)."""
    for name in ("kind", "exception", "message", "magnitude"):
        if expected.get(name) and found.get(name) != expected[name]:
            return False
    return not contradicts(expected, found)


def contradicts(a: dict, b: dict) -> bool:
    """A dimension one side needs that the other found the failure independent of."""
    return bool(set(a.get("needs", ())) & set(b.get("independent", ()))) or bool(
        set(b.get("needs", ())) & set(a.get("independent", ()))
    )


def differences(expected: dict, found: dict) -> str:
    """What differs, for a reason line: ``exception CheckFailure -> RankError; magnitude small -> large``."""
    parts = [
        f"{name} {expected.get(name) or '-'} -> {found.get(name) or '-'}"
        for name in ("kind", "exception", "message", "magnitude")
        if expected.get(name) and found.get(name) != expected[name]
    ]
    clash = sorted(
        (set(expected.get("needs", ())) & set(found.get("independent", ())))
        | (set(found.get("needs", ())) & set(expected.get("independent", ())))
    )
    if clash:
        parts.append(f"conditions differ on {', '.join(clash)}")
    return "; ".join(parts)
