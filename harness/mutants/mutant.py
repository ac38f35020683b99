"""One named source change to ``impl/``: the snippet, its replacement, the checks that must fail on it.

The catalog of them is ``harness/mutants/catalog.py``; the loader applies one at import time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    module: str
    original: str
    replacement: str
    killed_by: tuple
    target: str = "impl"
