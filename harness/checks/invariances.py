"""Invariances: chunking, the entropy-gradient gate and response-only evaluation change nothing.

Bit for bit is impl's own promise (rows computed independently, the gate
marking the same values non-differentiable, response-only rows read in
place). For another target the CONTRACT is that the two configurations give
the same values within the tolerance policy, i.e. each matches the float64
oracle; bit-exactness is then a determinism matter (tier ``hardening``)
unless the target declares the ``bit_exact`` capability. Each check takes
``exact``: None follows the target's declaration, True demands bit-identity.

Token-level variants exist so a token-only target (NeMo-RL, SkyRL's
Functions, megatron-style cross-entropies) gets every check its entry points
allow.
"""

from __future__ import annotations

from harness.cases.case import Case
from harness.checks import judge
from harness.checks.failure import GRADIENT, GRAPH, LAYOUT, ensure
from harness.checks.parity import (
    assert_dropped_zero,
    assert_packed_backward,
    assert_packed_forward,
    assert_token_backward,
    assert_token_forward,
    consumed_positions,
    gather_samples,
    replayable,
    require,
    required_capabilities,
    run_ranks,
)
from harness.checks.policy import assert_policy_loss
from harness.checks.subtests import GRAD_LOGITS, GRAPH_FLAGS, subtest
from harness.jobs.logits import packed_job, policy_job, token_job
from harness.targets import load_target

BIT_EXACT = "bit_exact"


def promised_bit_exact(spec: str, exact: bool | None) -> bool:
    """Whether a check demands bit-identity: ``exact`` if given, else the target's ``bit_exact`` declaration."""
    return BIT_EXACT in load_target(spec).capabilities if exact is None else exact


def _assert_outputs_identical(case: Case, first: list, second: list, label: str, keys=("log_probs", "entropy")) -> None:
    for key in keys:
        with subtest(key):
            for rank, (a, b) in enumerate(zip(first, second)):
                x, y = a.get(key), b.get(key)
                if x is None or y is None:
                    ensure(
                        x is None and y is None,
                        LAYOUT,
                        f"rank {rank} {key}: returned in one configuration only ({label})",
                    )
                    continue
                for i, (u, v) in enumerate(zip(x, y) if isinstance(x, list) else [(x, y)]):
                    judge.identical(v, u, what=f"rank {rank} {key}[{i}], {label}")


def _assert_grads_identical(first: list, second: list, label: str) -> None:
    with subtest(GRAD_LOGITS):
        for rank, (a, b) in enumerate(zip(first, second)):
            judge.identical(b["grad"], a["grad"], what=f"rank {rank} grad(logits), {label}", kind=GRADIENT)


# ---- chunking and the entropy-gradient gate, at either level -------------------------------

# level -> (job, forward check against the oracle, backward check against the oracle)
LEVELS = {
    "packed": (packed_job, assert_packed_forward, assert_packed_backward),
    "token": (token_job, assert_token_forward, assert_token_backward),
}


def _chunk_invariance(case: Case, spec: str, exact: bool | None, level: str) -> None:
    job, forward, backward = LEVELS[level]
    require(spec, required_capabilities(case, level), every_example={"chunking"})
    chunked = run_ranks(job, case, spec)
    whole = run_ranks(job, case.with_(chunk_size=None), spec)
    label = f"chunk_size={case.chunk_size} vs one chunk"
    if promised_bit_exact(spec, exact):
        _assert_outputs_identical(case, chunked, whole, label)
        _assert_grads_identical(chunked, whole, label)
        return
    for results in (chunked, whole):
        forward(case, results)
        backward(case, results)


def _assert_gate_flags(off: list, token_level: bool) -> None:
    """With the gate off no non-empty entropy carries a graph and every non-empty log-prob still does.

    Empty outputs (a CP rank holding none of a sample's response) hold no value
    to differentiate: whether THEIR flags agree across ranks is bug 4's check
    (``check_cp_requires_grad``), so a FAIL here names the gate.
    """
    with subtest(GRAPH_FLAGS):
        _gate_flags(off, token_level)


def _gate_flags(off: list, token_level: bool) -> None:
    for rank, result in enumerate(off):
        if token_level:
            flag = result["entropy_requires_grad"]
            ensure(flag is False, GRAPH, f"rank {rank}: entropy_grad=False returned entropy that requires grad: {flag}")
            continue
        entropy = zip(result["entropy_requires_grad"], (v.numel() for v in result["entropy"]))
        kept = [i for i, (flag, size) in enumerate(entropy) if size and flag]
        ensure(
            not kept,
            GRAPH,
            f"rank {rank}: entropy_grad=False returned entropy that requires grad (sample(s) {kept})",
        )
        log_probs = zip(result["log_probs_requires_grad"], (v.numel() for v in result["log_probs"]))
        lost = [i for i, (flag, size) in enumerate(log_probs) if size and not flag]
        ensure(not lost, GRAPH, f"rank {rank}: log-probs of sample(s) {lost} lost their graph with the gate off")


def _gate_invariance(case: Case, spec: str, exact: bool | None, level: str) -> None:
    job, forward, _ = LEVELS[level]
    require(spec, required_capabilities(case, level), every_example={"entropy", "entropy_gate"})
    case = case.with_(with_entropy=True)
    on = run_ranks(job, case, spec, entropy_grad=True)
    off = run_ranks(job, case, spec, entropy_grad=False)
    if promised_bit_exact(spec, exact):
        _assert_outputs_identical(case, on, off, "gate off vs on")
    else:
        forward(case, on)
        forward(case, off)
    _assert_gate_flags(off, token_level=level == "token")


@replayable
def check_chunk_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Packed path: chunk_size=c and one chunk give the same values and gradient (bit for bit if ``exact``)."""
    _chunk_invariance(case, spec, exact, "packed")


@replayable
def check_token_chunk_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Token level: chunk_size=c and one chunk give the same values and gradient (bit for bit if ``exact``)."""
    _chunk_invariance(case, spec, exact, "token")


@replayable
def check_gate_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Packed path: entropy values do not depend on whether their gradient is kept; log-probs unaffected."""
    _gate_invariance(case, spec, exact, "packed")


@replayable
def check_token_gate_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Token level: entropy values do not depend on whether their gradient is kept; log-probs unaffected."""
    _gate_invariance(case, spec, exact, "token")


# ---- response-only evaluation -------------------------------------------------------------


@replayable
def check_response_only(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Response-only (and loss-mask-only) equal the full path on consumed positions (slime #2076)."""
    require(spec, required_capabilities(case, "policy_loss"), every_example={"response_only"})
    full_case, compact_case = case.with_(response_only=False, loss_mask_only=False), case.with_(response_only=True)
    full = run_ranks(policy_job, full_case, spec)
    compact = run_ranks(policy_job, compact_case, spec)
    consumed = consumed_positions(compact_case)
    keys = ("log_probs", "entropy") if case.with_entropy else ("log_probs",)
    for key in keys:
        with subtest(key):
            assert_dropped_zero(gather_samples(case, compact, key), consumed, f"{key} (response-only)")
    if not promised_bit_exact(spec, exact):
        assert_policy_loss(full_case, full, spec)
        assert_policy_loss(compact_case, compact, spec)
        return
    for key in keys:
        with subtest(key):
            full_values, compact_values = gather_samples(case, full, key), gather_samples(case, compact, key)
            for i, (x, y, c) in enumerate(zip(full_values, compact_values, consumed)):
                judge.identical(y[c], x[c], what=f"{key}[sample {i}] response-only vs full, consumed positions")
    _assert_grads_identical(full, compact, "response-only vs full")
