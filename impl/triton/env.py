"""What the environment says about Triton, without importing it: installed? running under its CPU interpreter?

``impl.backend`` asks these questions for every call, and the kernels ask the second one when they are defined
and launched; keeping the answers here (no ``triton`` import, no kernel) is what lets ``impl.backend`` import
them eagerly while the kernels stay a lazy, optional import.
"""

from __future__ import annotations

import importlib.util
import os


def triton_available() -> bool:
    """True when ``triton`` can be imported (an optional dependency: ``pip install logprob-harness[triton]``)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True when Triton kernels run under the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
