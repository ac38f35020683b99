"""The forward-only check (harness/checks/forward_only.py) fails each way a forward-only path can be wrong."""

import pytest

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.checks.forward_only import check_hidden_forward_only, check_packed_forward_only, check_token_forward_only

FAKES = "tests/fakes/forward_only_targets.py"
TOKEN = Case(seed=1, vocab=12, samples=((6, 4),), with_entropy=True)
PACKED = Case(seed=2, vocab=12, samples=((7, 4), (5, 3)), with_entropy=True)
HIDDEN = with_hidden_size(Case(seed=3, vocab=12, samples=((6, 4),)), 5)


def test_impl_passes_every_entry_point():
    check_token_forward_only(TOKEN, "impl")
    check_packed_forward_only(PACKED, "impl")
    check_hidden_forward_only(HIDDEN, "impl")


@pytest.mark.parametrize(
    "check, case, target, message",
    [
        (check_token_forward_only, TOKEN, "KeepsAGraph", "carries a graph"),
        (check_packed_forward_only, PACKED, "RoundsOtherwise", "is not the grad-enabled call's"),
        (check_hidden_forward_only, HIDDEN, "NeedsAGraph", "doesn.t require gradient"),
    ],
    ids=("graph", "values", "error"),
)
def test_a_defect_on_the_forward_only_path_fails(check, case, target, message):
    with pytest.raises((AssertionError, RuntimeError), match=message):
        check(case, f"{FAKES}:{target}")
