"""Each bad-input row declares every capability its call exercises (properties/test_bad_inputs.py, and the
hidden-state table's ``NEEDS``, properties/test_hidden_bad_inputs.py).

The family kernel's boundary (harness/targets/upstream/family.py) validates a call's protocol values, then
refuses a call needing a capability the revision does not declare, with a ValueError naming it, and drops a
chunk size where chunking is undeclared: either way the harness answers and upstream code never sees the bad
value. A row whose call needs a capability it does not declare is judged on that answer for a family lacking
it (a PASS, or a FAIL of the harness's own message: slime's #1285 read a FAIL for the bshd-with-allgather row
from it), so each row's ``needs`` must be what its call asks, as the boundary reads it from the call record.
"""

import pytest

from harness.targets.upstream import calls
from harness.targets.upstream.family import FamilyTarget
from properties import test_hidden_bad_inputs as hidden_table
from properties.test_bad_inputs import BAD_INPUTS

LEVELS = {"token", "packed", "policy_loss", "hidden", "entropy"}  # what every row of its level asks anyway


class _Asked(Exception):
    def __init__(self, needs):
        self.needs = needs


class _Recorder:
    """FamilyTarget's own entry points (the call record built as for any family), whose boundary reports what
    the call asks instead of calling upstream code."""

    name = "recorder"
    capabilities = frozenset({"entropy"})

    def _call(self, serves, call):
        try:
            call.validate()
        except ValueError:  # the protocol's own refusal: no capability is asked before it
            raise _Asked(frozenset()) from None
        needs = call.needs() - LEVELS
        if getattr(call, "chunk_size", None) is not None:  # the boundary drops it where chunking is undeclared
            needs.add("chunking")
        raise _Asked(frozenset(needs))


for _record in calls.RECORDS:
    setattr(_Recorder, _record.serves, getattr(FamilyTarget, _record.serves))


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda bad: bad.name)
def test_a_bad_input_row_declares_what_its_call_needs(bad):
    with pytest.raises(_Asked) as asked:
        bad.call(_Recorder())
    assert asked.value.needs == bad.needs, (bad.name, sorted(asked.value.needs), sorted(bad.needs))


@pytest.mark.parametrize("name", sorted(hidden_table.BAD))
def test_a_hidden_bad_input_row_declares_what_its_call_needs(name):
    changes, _error, _mentions = hidden_table.BAD[name]
    with pytest.raises(_Asked) as asked:
        hidden_table._call(_Recorder(), **changes)
    assert asked.value.needs == hidden_table.NEEDS.get(name, set()), (name, sorted(asked.value.needs))
