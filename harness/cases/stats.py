"""Counts of the generated cases that actually ran, by parallel layout.

The closing question of every distributed property is "how many examples
really exercised tp >= 2 / cp >= 2?": a property that silently skips its
hard cases is a defect, so the counts are printed at the end of every
session (aggregated over pytest-xdist workers through small JSON files).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

_COUNTS: Counter = Counter()


def layout_key(case) -> str:
    return f"tp={case.tp} cp={case.cp} mode={case.cp_mode}"


def record(case) -> None:
    _COUNTS[layout_key(case)] += 1


def counts() -> Counter:
    return Counter(_COUNTS)


def dump(directory: Path) -> None:
    """Write this process's counts (one file per process, so xdist workers never clash)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{os.getpid()}.json").write_text(json.dumps(dict(_COUNTS)))


def load_all(directory: Path) -> Counter:
    total: Counter = Counter()
    for path in directory.glob("*.json"):
        total.update(json.loads(path.read_text()))
    return total
