"""The mutant check: every historic bug re-created must be caught.

Each mutant runs its regression file(s) in a fresh pytest process with
``LPH_MUTANT`` set (and the no-shrink ``mutants`` Hypothesis profile, since
only the failure matters); the test passes only if pytest exits 1 with failed
tests. The unmutated runs of the same regressions are part of the suite itself.
``nox -s tests`` runs one representative mutant per bug class; the others are
marked ``nightly`` and run in ``nox -s slow``. A mutant whose probe finds
that it changes no bits on this machine is skipped as EQUIVALENT HERE, with
the probe's figure (harness/mutants/probes.py).
"""

import pytest

from harness.mutants.catalog import MUTANTS
from harness.mutants.loader import MutantDoesNotApply, mutated_source
from harness.mutants.runner import ROOT, run_mutant, within


def _nightly_unless_representative(mutant):
    return pytest.param(mutant, id=mutant.name, marks=() if mutant.representative else pytest.mark.nightly)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", [_nightly_unless_representative(m) for m in MUTANTS])
def test_mutant_is_killed_by_its_regression(mutant, monkeypatch):
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "mutants")
    result = run_mutant(mutant, extra_args=["-x"])
    if result.equivalent_here:
        pytest.skip(f"EQUIVALENT HERE: {result.probe} (harness/mutants/probes.py)")
    assert result.killed, f"mutant {mutant.name} SURVIVED (exit {result.returncode}):\n{result.output[-3000:]}"
    assert all(within(failed, mutant.killed_by) for failed in result.failed), (mutant.killed_by, result.failed)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_snippet_still_applies(mutant):
    path = ROOT / (mutant.module.replace(".", "/") + ".py")
    assert all((ROOT / selection.split("::")[0]).is_file() for selection in mutant.killed_by), mutant.killed_by
    assert mutated_source(mutant, path.read_text()) != path.read_text()


def test_stale_mutant_fails_loudly():
    with pytest.raises(MutantDoesNotApply, match="exactly once"):
        mutated_source(MUTANTS[0], "no snippet here")


def test_every_bug_class_has_exactly_one_representative():
    """The fast suite's mutant check covers every class; a new class must name the mutant that stands for it."""
    classes = {mutant.bug_class for mutant in MUTANTS}
    assert "" not in classes, [m.name for m in MUTANTS if not m.bug_class]
    for bug_class in classes:
        representatives = [m.name for m in MUTANTS if m.bug_class == bug_class and m.representative]
        assert len(representatives) == 1, (bug_class, representatives)
