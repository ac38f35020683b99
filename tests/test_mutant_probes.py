"""A mutant whose effect a BLAS decides cannot make the mutant check red on a machine where it changes no bits.

``hidden_last_block_unpadded`` changes only the row count of one GEMM; whether that changes a row's bits is the
CPU's and its BLAS's business (harness/mutants/probes.py). These tests force the probe's answer both ways, so they
hold on any machine: equivalent here means reported with the figure and never run; detectable means run as
any other mutant.
"""

import subprocess

import pytest

from harness.mutants import probes, runner
from harness.mutants.catalog import MUTANTS, by_name

PROBED = by_name("hidden_last_block_unpadded")


def _forced(monkeypatch, differing: int) -> None:
    monkeypatch.setattr(probes, "last_block_rows", lambda: probes.ProbeResult(differing, 42, "forced"))


def test_an_equivalent_mutant_is_reported_with_its_figure_and_never_run(monkeypatch):
    _forced(monkeypatch, differing=0)

    def no_subprocess(*args, **kwargs):
        raise AssertionError("an equivalent-here mutant must not be run")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    result = runner.run_mutant(PROBED)
    assert result.verdict == "equivalent here" and not result.killed
    assert "0 of 42 shapes" in result.output


def test_a_detectable_mutant_is_run_and_judged_as_any_other(monkeypatch):
    _forced(monkeypatch, differing=3)
    ran = []

    def fake_pytest(command, **kwargs):
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")  # passed: nothing failed, so it SURVIVED

    monkeypatch.setattr(subprocess, "run", fake_pytest)
    result = runner.run_mutant(PROBED)
    assert ran and result.verdict == "SURVIVED"


def test_the_mutant_check_skips_an_equivalent_mutant_with_the_probe_figure(monkeypatch):
    """tests/test_mutants.py's own code path: an equivalent mutant is a reported skip, never a failure."""
    from tests.test_mutants import test_mutant_is_killed_by_its_regression

    _forced(monkeypatch, differing=0)
    with pytest.raises(pytest.skip.Exception, match="EQUIVALENT HERE.*0 of 42 shapes"):
        test_mutant_is_killed_by_its_regression(PROBED, monkeypatch)


def test_every_probe_names_a_probe_function_that_tries_shapes():
    for mutant in MUTANTS:
        if mutant.probe:
            result = runner.resolve(mutant.probe)()
            assert result.tried > 0 and 0 <= result.differing <= result.tried, (mutant.name, result)
