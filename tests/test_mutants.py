"""The mutant check inside ``nox -s tests``: every historic bug re-created must be caught.

Each mutant runs its regression file(s) in a fresh pytest process with
``LPH_MUTANT`` set (and the no-shrink ``mutants`` Hypothesis profile, since
only the failure matters); the test passes only if pytest exits 1 with failed
tests. The unmutated runs of the same regressions are part of the suite itself.
"""

import pytest

from harness.mutants.catalog import MUTANTS
from harness.mutants.loader import MutantDoesNotApply, mutated_source
from harness.mutants.runner import ROOT, run_mutant


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_killed_by_its_regression(mutant, monkeypatch):
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "mutants")
    result = run_mutant(mutant, extra_args=["-x"])
    assert result.killed, f"mutant {mutant.name} SURVIVED (exit {result.returncode}):\n{result.output[-3000:]}"
    killed_files = {failed.split("::")[0] for failed in result.failed}
    assert killed_files <= set(mutant.killed_by), result.failed


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_snippet_still_applies(mutant):
    path = ROOT / (mutant.module.replace(".", "/") + ".py")
    assert mutated_source(mutant, path.read_text()) != path.read_text()


def test_stale_mutant_fails_loudly():
    with pytest.raises(MutantDoesNotApply, match="exactly once"):
        mutated_source(MUTANTS[0], "no snippet here")
