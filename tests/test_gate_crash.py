"""A target that kills the test process costs one check, not the suite (harness.gate.journal).

The bad-input row "targets too short" once took Liger's whole gate run down
(its fused kernel reads past the targets' end: SIGSEGV under Triton's CPU
interpreter), so the row had to be deselected by hand. The gate now records
the check the process died in as a FAIL of kind ``crash`` in its own tier,
keeps the verdicts decided before it and runs the rest.
"""

from harness.checks.failure import CRASH
from harness.gate import journal, specs
from harness.gate.runner import run_suite
from harness.gate.verdicts import FAIL, PASS, Verdict

CHECKS = "tests/fakes/crashing_checks.py"


def test_a_check_that_kills_the_process_is_a_crash_and_the_rest_still_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LPH_CRASH_DEMO", "1")
    monkeypatch.setenv("LPH_ABLATION", "0")  # what is under test is the crash verdict, not the diagnosis
    # a journal left in the directory by an earlier run is not this run's
    journal.decided(tmp_path, Verdict("tests/fakes/crashing_checks.py::test_ghost", PASS, "contract"))
    journal.started(tmp_path, "tests/fakes/crashing_checks.py::test_ghost_running", "contract")
    resolved = specs.ResolvedSpec("impl", "impl", "impl")
    run, _ = run_suite(resolved, tmp_path, [CHECKS, "-p", "no:cacheprovider", "-q"])
    verdicts = {key.split("::")[-1]: v for key, v in run.verdicts.items()}
    assert set(verdicts) == {"test_before_the_crash", "test_the_target_kills_the_process", "test_after_the_crash"}
    crashed = verdicts["test_the_target_kills_the_process"]
    assert (crashed.outcome, crashed.kind, crashed.tier) == (FAIL, CRASH, "hardening")
    assert "SIGSEGV" in crashed.reason
    assert verdicts["test_before_the_crash"].outcome == PASS
    assert verdicts["test_after_the_crash"].outcome == FAIL
    assert (tmp_path / "verdicts.json").is_file()
