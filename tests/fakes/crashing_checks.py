"""Three checks, one of which kills its process, for ``tests/test_gate_crash.py`` (never collected by the suite).

The middle one dies the way a native kernel reading past a tensor's end does:
by a signal, with no exception for pytest to report. It only dies when the
gate test asks (``LPH_CRASH_DEMO``), so a stray run of this file is harmless.
"""

import os
import signal

import pytest


@pytest.mark.tier("contract")
def test_before_the_crash():
    assert True


@pytest.mark.tier("hardening")
def test_the_target_kills_the_process():
    if os.environ.get("LPH_CRASH_DEMO") == "1":
        os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.tier("contract")
def test_after_the_crash():
    assert 1 + 1 == 3, "a plain failure after the crash is still decided"
