"""Bad input to the hidden-state entry point gets a clear error naming the argument, never a wrong answer.

A table (OpInfo's ``error_inputs`` habit): each row changes one argument of a
small valid call and names the exception type and the word the message must carry.
"""

import pytest
import torch

from harness.checks.parity import require
from harness.targets import load_target

ROWS, H, V = 5, 4, 6


def _call(target, **changes):
    g = torch.Generator().manual_seed(0)
    args = {
        "hidden": torch.randn(ROWS, H, generator=g),
        "weight": torch.randn(V, H, generator=g),
        "targets": torch.randint(0, V, (ROWS,), generator=g),
        "chunk_size": None,
        "temperature": 1.0,
    }
    args.update(changes)
    return target.hidden_log_probs(
        args["hidden"],
        args["weight"],
        args["targets"],
        tp_group=None,
        chunk_size=args["chunk_size"],
        with_entropy=False,
        entropy_grad=True,
        temperature=args["temperature"],
    )


BAD = {
    "hidden 3-D": (dict(hidden=torch.zeros(1, ROWS, H)), ValueError, "hidden"),
    "weight transposed": (dict(weight=torch.zeros(H + 1, V)), ValueError, "weight"),
    "dtypes differ": (dict(weight=torch.zeros(V, H, dtype=torch.bfloat16)), TypeError, "dtype"),
    "integer hidden": (dict(hidden=torch.zeros(ROWS, H, dtype=torch.long)), TypeError, "hidden"),
    "empty head shard": (dict(weight=torch.zeros(0, H)), ValueError, "V_local"),
    "targets too short": (dict(targets=torch.zeros(ROWS - 1, dtype=torch.long)), ValueError, "targets"),
    "float targets": (dict(targets=torch.zeros(ROWS)), TypeError, "targets"),
    "target outside the vocabulary": (dict(targets=torch.full((ROWS,), V + 5)), ValueError, "targets"),
    "negative target": (dict(targets=torch.full((ROWS,), -1)), ValueError, "targets"),
    "chunk_size 0": (dict(chunk_size=0), ValueError, "chunk_size"),
    "temperature 0": (dict(temperature=0.0), ValueError, "temperature"),
    "temperature inf": (dict(temperature=float("inf")), ValueError, "temperature"),
}
# What a row's argument needs the target to support (a target without temperature is not asked about one).
NEEDS = {"chunk_size 0": {"chunking"}, "temperature 0": {"temperature"}, "temperature inf": {"temperature"}}


@pytest.mark.tier("hardening")
@pytest.mark.parametrize("name", sorted(BAD))
def test_hidden_bad_input_is_a_clear_error(name, spec):
    require(spec, {"hidden"} | NEEDS.get(name, set()))
    changes, error, mentions = BAD[name]
    with pytest.raises(error, match=mentions):
        _call(load_target(spec), **changes)
