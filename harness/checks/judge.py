"""One judge per output kind: every entry point compares its outputs through here.

The tolerance policy (``harness.checks.tolerance``: 2 x the naive same-dtype
error + a rounding floor) and the rounding-only classification (an error
over the bound that rounding in the working dtype explains is a precision
verdict, hardening, never a contract FAIL) must be the same for the token,
packed, policy, token-level policy, hidden-state and sampling checks. They
drifted once: the sampling and token-level policy comparisons left the
working dtype out, so a bf16 sampling case over its bound by rounding alone
read as a contract failure. Here the working dtype is a required argument:
a new entry point states the dtype its target computes in (the Case's dtype
for everything that reads the logits; float32 for the token-level loss,
whose inputs are float32 matrices) and cannot leave the classification out.

* ``value``: a forward output (log-probs, entropy, a loss); rounding of the
  output is counted in float32 unless the output's own dtype is given;
* ``gradient``: a gradient; its output dtype is the working dtype (the
  gradient of bf16 logits is bf16);
* ``identical``: bit-identity where the math promises it (no tolerance).

Checks never call the tolerance helpers directly (a self-test in
tests/test_tolerance.py reads the sources).
"""

from __future__ import annotations

import torch

from harness.checks.failure import GRADIENT, VALUE
from harness.checks.tolerance import Comparison, assert_close, assert_identical


def value(
    actual, ref, naive, *, what: str, scale: float, working_dtype, out_dtype=torch.float32, rounding: float = 0.0
) -> Comparison:
    """A forward output against the float64 reference under the policy; raises a ``value`` (or precision) failure."""
    return _judged(VALUE, actual, ref, naive, what, scale, working_dtype, out_dtype, rounding)


def gradient(
    actual, ref, naive, *, what: str, scale: float, working_dtype, out_dtype=None, rounding: float = 0.0
) -> Comparison:
    """A gradient against the float64 reference under the policy; raises a ``gradient`` (or precision) failure."""
    out_dtype = working_dtype if out_dtype is None else out_dtype
    return _judged(GRADIENT, actual, ref, naive, what, scale, working_dtype, out_dtype, rounding)


def _judged(kind, actual, ref, naive, what, scale, working_dtype, out_dtype, rounding) -> Comparison:
    return assert_close(
        actual,
        ref,
        naive,
        what=what,
        scale=scale,
        out_dtype=out_dtype,
        rounding=rounding,
        working_dtype=working_dtype,
        kind=kind,
    )


def identical(actual: torch.Tensor, expected: torch.Tensor, *, what: str, kind: str = VALUE) -> None:
    """Bit for bit, where the math promises it (chunking, the gate, response-only, TP ranks)."""
    assert_identical(actual, expected, what=what, kind=kind)
