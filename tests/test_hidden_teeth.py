"""The hidden-path checks fail on stand-ins carrying the historic bugs, and pass on impl/.

``tests/fakes/hidden_targets.py``: a backward that builds one_hot over the
vocabulary (the one_hot regression's hidden-path case must name it), and a
forward that writes ``hidden`` in place (the inputs-unmutated check must).
"""

import pytest

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.checks.hidden import check_hidden_inputs_unmutated
from harness.memory.hidden import HiddenMemoryCase, measure_hidden_memory, target_runner
from harness.memory.tracker import int64_with_dimension
from harness.targets import load_target

STAND_INS = "tests/fakes/hidden_targets.py"
SCALE = HiddenMemoryCase(rows=4096, hidden_size=256, vocab_local=18_992, with_entropy=False)


@pytest.mark.parametrize("spec, expect_one_hot", [("impl", False), (f"{STAND_INS}:OneHotHidden", True)])
def test_one_hot_mechanism_is_seen_on_the_hidden_path(spec, expect_one_hot):
    report = measure_hidden_memory(SCALE, target_runner(load_target(spec), SCALE))
    assert bool(int64_with_dimension(report.allocations, SCALE.vocab_local)) == expect_one_hot, str(report)


def test_in_place_write_on_hidden_is_caught():
    case = with_hidden_size(Case(seed=1, vocab=12, samples=((6, 2),), temperature=0.7, with_entropy=False), 5)
    check_hidden_inputs_unmutated(case, "impl")
    with pytest.raises(AssertionError, match="the target modified hidden"):
        check_hidden_inputs_unmutated(case, f"{STAND_INS}:InPlaceHidden")
