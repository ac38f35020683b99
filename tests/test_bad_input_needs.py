"""Each bad-input row declares every capability its call exercises (properties/test_bad_inputs.py).

The family kernel's boundary (harness/targets/upstream/family.py) validates a call's protocol values, then
refuses a call needing a capability the revision does not declare, with a ValueError naming it, and drops a
chunk size where chunking is undeclared: either way the harness answers and upstream code never sees the bad
value. A row whose call needs a capability it does not declare is judged on that answer for a family lacking
it (a PASS, or a FAIL of the harness's own message: slime's #1285 read a FAIL for the bshd-with-allgather row
from it), so each row's ``needs`` must be what its call asks, as the boundary reads it from the call record.
"""

import pytest

from harness.targets.upstream import calls
from properties.test_bad_inputs import BAD_INPUTS


class _Asked(Exception):
    def __init__(self, needs):
        self.needs = needs


class _Recorder:
    """A target declaring everything, whose entry points build the call record and report what it needs."""

    name = "recorder"
    capabilities = frozenset({"entropy"})

    def __getattr__(self, serves):
        record = next((r for r in calls.RECORDS if r.serves == serves), None)
        if record is None:
            raise AttributeError(serves)
        signature = calls.signature(record)

        def entry_point(*args, **keywords):
            arguments = signature.bind(self, *args, **keywords).arguments
            del arguments["self"]
            call = record(**arguments, **record.fixed)
            try:
                call.validate()
            except ValueError:  # the protocol's own refusal: no capability is asked before it
                raise _Asked(frozenset()) from None
            needs = call.needs() - {"token", "packed", "policy_loss", "entropy"}
            if getattr(call, "chunk_size", None) is not None:  # the boundary drops it where chunking is undeclared
                needs.add("chunking")
            raise _Asked(frozenset(needs))

        return entry_point


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda bad: bad.name)
def test_a_bad_input_row_declares_what_its_call_needs(bad):
    with pytest.raises(_Asked) as asked:
        bad.call(_Recorder())
    assert asked.value.needs == bad.needs, (bad.name, sorted(asked.value.needs), sorted(bad.needs))
