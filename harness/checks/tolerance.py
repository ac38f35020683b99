"""The tolerance policy: error bounded by the naive same-dtype error plus a rounding floor.

FlashAttention's tests assert ``|out - ref| <= k * |out_naive - ref| + floor``
with ``ref`` in higher precision. Here ``ref`` is the float64 oracle,
``out_naive`` is plain torch ``log_softmax`` in the input dtype on unsharded
logits, and the floor is a few units of rounding of the fp32 math at the
magnitude the computation really works at (``|z|/T + log V``: the scale of
the log-sum-exp that every value is a difference against), plus rounding of
the output dtype. Nothing is tuned per test: bf16 gets a bf16-sized bound
because its naive error is bf16-sized, fp32 gets an fp32-sized one.

Non-finite reference entries (``-inf`` log-probs of masked columns) must be
matched exactly; a NaN where the reference is finite is always a failure.
When the naive computation itself is non-finite (it overflowed), only the
floor is allowed: never a free pass.

Precision, not contract: the naive error is itself an accident of rounding
and can be tiny (a bf16 case of 2 rows and 2 classes whose naive result
happens to land on the reference), so an error over the bound may still be
one a correct implementation working in the Case's dtype makes by rounding
alone. Such an error, at most ``PRECISION_ULPS`` units of the working dtype at
the output's magnitude, raises ``PrecisionOnly`` (an AssertionError with
``precision_only = True``), which the gate reads as a precision verdict in
the ``hardening`` tier, never a contract FAIL. In fp32 this allowance sits
far below the floor: only a reduced-precision Case can produce it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.checks.failure import LAYOUT, PRECISION, VALUE, CheckFailure, ensure

NAIVE_FACTOR = 2.0
FLOOR_ULPS = 8.0
PRECISION_ULPS = 2.0  # what rounding in the working dtype explains: two of its units at the output's magnitude
FP32_EPS = torch.finfo(torch.float32).eps


class PrecisionOnly(CheckFailure):
    """Over the bound, but within what rounding in the Case's dtype explains: a precision verdict (hardening).

    ``comparison`` holds the figures. Its own type (not a flag on a plain
    AssertionError) also keeps Hypothesis from shrinking a true defect into
    a precision-only example: distinct exception types are distinct failures.
    """

    precision_only = True

    def __init__(self, comparison: Comparison):
        message = f"{comparison} (precision only: within {PRECISION_ULPS:g} units of the working dtype)"
        figures = {
            "max_error": comparison.max_error,
            "bound": comparison.bound,
            "precision": comparison.precision,
            "reference": comparison.reference,
        }
        super().__init__(message, kind=PRECISION, figures=figures)
        self.comparison = comparison


@dataclass
class Comparison:
    what: str
    max_error: float
    mean_error: float
    naive_error: float
    bound: float
    worst: str
    precision: float = 0.0  # the working dtype's rounding at the output's magnitude (0: not a reduced dtype)
    reference: float = 0.0  # the reference's largest finite magnitude (the error's yardstick in a signature)

    @property
    def ok(self) -> bool:
        return self.max_error <= self.bound

    @property
    def precision_only(self) -> bool:
        """Failed the bound, but by no more than rounding in the working dtype can explain."""
        return not self.ok and self.max_error <= self.precision

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        return (
            f"{self.what}: max|err|={self.max_error:.3e} mean|err|={self.mean_error:.3e} "
            f"naive={self.naive_error:.3e} bound={self.bound:.3e} [{verdict}] {self.worst}"
        )


def _finite_max(t: torch.Tensor) -> float:
    t = t[torch.isfinite(t)]
    return float(t.abs().max()) if t.numel() else 0.0


def value_scale(logits: torch.Tensor, temperature: float) -> float:
    """Magnitude of the fp32 log-sum-exp arithmetic for these logits."""
    return _finite_max(logits.double()) / temperature + math.log(max(logits.shape[-1], 1)) + 1.0


def gradient_scale(logits: torch.Tensor, temperature: float, upstream: float) -> float:
    """Magnitude of the fp32 gradient arithmetic: value scale x upstream weight x 1/T."""
    return value_scale(logits, temperature) * upstream / temperature


def _errors(actual: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    actual, ref = actual.double(), ref.double()
    finite = torch.isfinite(ref)
    err = torch.where(finite, (actual - ref).abs(), torch.zeros_like(ref))
    mismatch_nonfinite = ~finite & (actual != ref)
    err = torch.where(mismatch_nonfinite | torch.isnan(actual), torch.full_like(err, math.inf), err)
    return err


def precision_allowance(ref: torch.Tensor, working_dtype) -> float:
    """``PRECISION_ULPS`` units of ``working_dtype`` at ``ref``'s magnitude; 0 for fp32/fp64 or no dtype."""
    if working_dtype is None or working_dtype in (torch.float32, torch.float64):
        return 0.0
    return PRECISION_ULPS * torch.finfo(working_dtype).eps * _finite_max(ref)


def compare(
    actual,
    ref,
    naive,
    *,
    what: str,
    scale: float,
    out_dtype=torch.float32,
    rounding: float = 0.0,
    working_dtype=None,
) -> Comparison:
    """Compare ``actual`` with the float64 ``ref`` under the policy (see module docstring).

    ``rounding``: an error every correct implementation carries that the naive
    path does not bound reliably (the hidden path's logits rounded to the
    input dtype, ``hidden_logit_rounding``); added to the bound as is.
    ``working_dtype``: the Case's dtype, for the precision-only allowance.
    """
    actual, ref, naive = actual.detach().cpu(), ref.detach().cpu(), naive.detach().cpu()
    if actual.shape != ref.shape:
        return Comparison(
            what, math.inf, math.inf, 0.0, 0.0, f"shape {tuple(actual.shape)} != reference shape {tuple(ref.shape)}"
        )
    err = _errors(actual, ref)
    naive_err = float(_errors(naive, ref).max()) if ref.numel() else 0.0
    floor = FLOOR_ULPS * (FP32_EPS * scale + torch.finfo(out_dtype).eps * _finite_max(ref))
    bound = floor + rounding + (NAIVE_FACTOR * naive_err if math.isfinite(naive_err) else 0.0)
    if not ref.numel():
        return Comparison(what, 0.0, 0.0, 0.0, bound, "(empty)")
    index = int(err.argmax())
    position = tuple(int(i) for i in torch.unravel_index(torch.tensor(index), err.shape))
    worst = f"worst at {position}: got {actual.flatten()[index].item()!r}, want {ref.flatten()[index].item()!r}"
    precision = precision_allowance(ref, working_dtype)
    return Comparison(what, float(err.max()), float(err.mean()), naive_err, bound, worst, precision, _finite_max(ref))


def assert_close(
    actual,
    ref,
    naive,
    *,
    what: str,
    scale: float,
    out_dtype=torch.float32,
    rounding: float = 0.0,
    working_dtype=None,
    kind: str = VALUE,
) -> Comparison:
    """``compare``, raising on a failure: ``PrecisionOnly`` when rounding in ``working_dtype`` explains it, else a
    ``CheckFailure`` of ``kind`` (a value, or ``GRADIENT``) carrying the error and its bound."""
    result = compare(
        actual, ref, naive, what=what, scale=scale, out_dtype=out_dtype, rounding=rounding, working_dtype=working_dtype
    )
    if result.precision_only:
        raise PrecisionOnly(result)
    if not result.ok:
        figures = {
            "max_error": result.max_error,
            "bound": result.bound,
            "naive_error": result.naive_error,
            "reference": result.reference,
        }
        raise CheckFailure(str(result), kind=kind, figures=figures)
    return result


def assert_identical(actual: torch.Tensor, expected: torch.Tensor, *, what: str, kind: str = VALUE) -> None:
    """Bit-identical, where the math promises it (gate on/off, response-only vs full)."""
    actual, expected = actual.detach().cpu(), expected.detach().cpu()
    shape, wanted = tuple(actual.shape), tuple(expected.shape)
    ensure(shape == wanted, LAYOUT, lambda: f"{what}: shape {shape} != {wanted}")
    same = (actual == expected) | (torch.isnan(actual) & torch.isnan(expected))
    if not bool(same.all()):
        index = int((~same).flatten().nonzero()[0])
        raise CheckFailure(
            f"{what}: not bit-identical at flat index {index}: {actual.flatten()[index].item()!r} "
            f"vs {expected.flatten()[index].item()!r} ({int((~same).sum())} of {same.numel()} differ)",
            kind=kind,
            figures={"differing": int((~same).sum())},
        )


# ---- the hidden-state path: the matmul's own error ----------------------------------


def matmul_magnitude(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max_ij (|a| @ |b|)_ij``: the scale of a matmul's rounding error.

    A dot product of length K rounds to within ``gamma_K (|a| @ |b|)``
    (Higham, Accuracy and Stability, 3.5), which can be far above
    ``|a @ b|`` when terms cancel. The hidden-state path puts a matmul in
    front of every value and another behind every gradient; the policy is
    unchanged (``k x naive + floor``, the naive path doing the SAME matmuls in
    the input dtype), only the floor's fp32 magnitude is this one instead of
    the logits' ``max|z|``.
    """
    if not a.numel() or not b.numel():
        return 0.0
    return float((a.double().abs() @ b.double().abs()).max())


def hidden_value_scale(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> float:
    """``value_scale`` with ``max|z|`` replaced by the matmul magnitude ``max (|h| @ |W|.T)``."""
    return matmul_magnitude(hidden, weight.T) / temperature + math.log(max(weight.shape[0], 1)) + 1.0


def hidden_logit_rounding(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> tuple[float, float]:
    """(log-prob, entropy) error of rounding each logit ONCE to the input dtype: 0 for fp32 inputs.

    A bf16/fp16 matmul returns its logits in that dtype, so every
    implementation that materialises them (chunk by chunk or whole) starts
    from ``z + dz`` with ``|dz| <= u M``, ``u`` the dtype's unit roundoff
    (eps / 2) and ``M = max (|h| @ |W|.T) / T``. Through the log-softmax:
    ``|d l_t| = |dz_t - sum_v p_v dz_v| <= 2 u M``, and
    ``|d H| = |sum_v p_v (z_v - E z) dz_v| <= u M * 2M``. The naive path
    rounds its logits the same way but then rounds its OUTPUT to the input
    dtype too, which can cancel the logit error by luck (seen: one bf16 row,
    naive error 1.1e-3 where the logit rounding alone gives 4.9e-3), so
    ``k x naive`` does not bound this term; the floor adds it explicitly. fp32
    inputs: the fp32 floor already covers it.
    """
    if hidden.dtype == torch.float32 or hidden.dtype == torch.float64:
        return 0.0, 0.0
    unit = torch.finfo(hidden.dtype).eps / 2
    magnitude = matmul_magnitude(hidden, weight.T) / temperature
    return 2 * unit * magnitude, 2 * unit * magnitude * max(magnitude, 1.0)


def hidden_gradient_scales(
    hidden: torch.Tensor, weight: torch.Tensor, grad_logits: torch.Tensor, temperature: float, upstream: float
) -> tuple[float, float]:
    """Floor magnitudes of ``grad_hidden = g @ W`` and ``grad_weight = g.T @ h``; ``g`` is the float64 logits gradient.

    Two sources, added: the matmul's own rounding (``|g| @ |W|``,
    ``|g|.T @ |h|``), and the fp32 rounding of ``g`` itself carried through
    it. ``g_v``'s rounding is at most a few ulps of ``p_v`` times the logits
    gradient's arithmetic scale (``gradient_scale`` with the matmul magnitude
    for ``max|z|``); as ``sum_v p_v = 1`` it reaches ``grad_hidden`` times at
    most ``max|W|``, and ``grad_weight[v, k]`` times at most ``sum_rows |h[:, k]|``.
    """
    inner = hidden_value_scale(hidden, weight, temperature) * upstream / temperature
    g = grad_logits.double().abs()
    h, w = hidden.double().abs(), weight.double().abs()
    grad_hidden = matmul_magnitude(g, w) + inner * (float(w.max()) if w.numel() else 0.0)
    grad_weight = matmul_magnitude(g.T, h) + inner * (float(h.sum(0).max()) if h.numel() else 0.0)
    return grad_hidden, grad_weight
