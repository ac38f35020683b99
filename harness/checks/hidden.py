"""Checks of the hidden-state entry point, shared by properties, regressions and replay.

Each ``check_hidden_*(case, target)`` takes a token-level Case (cp=1) with
``extra["hidden_size"]`` (``harness.cases.hidden``), runs
``harness.jobs.hidden:hidden_job`` on every TP rank through the rank pool,
and judges each output on its own (``harness.checks.subtests``) against the
float64 oracle (``oracles.hidden``) through the one judge
(``harness.checks.judge``), the tolerance extended by the matmul's own error
(``harness.checks.tolerance.hidden_value_scale`` / ``hidden_gradient_scales``), or
bit for bit where the computation promises it. The target gets fresh copies of
``hidden`` and the head shard (``harness.jobs.inputs``); writes into them are
``check_hidden_inputs_unmutated``'s finding alone. Failures carry the Case and a
replay command (``harness.checks.running.replayable``).
"""

from __future__ import annotations

import torch

from harness.cases.case import Case
from harness.cases.hidden import global_hidden, global_weight, hidden_size, probe_weights
from harness.checks import judge
from harness.checks.expected_hidden import hidden_reference
from harness.checks.failure import GRADIENT, GRAPH, VALUE, ensure
from harness.checks.invariances import promised_bit_exact
from harness.checks.parity import (
    assert_inputs_unmutated,
    assert_replicated_values,
    option_capabilities,
    replayable,
    replicated,
    require,
    run_ranks,
)
from harness.checks.subtests import ENTROPY, GRAD_HIDDEN, GRAD_WEIGHT, GRAPH_FLAGS, LOG_PROBS, subtest
from harness.checks.tolerance import hidden_gradient_scales, hidden_logit_rounding, hidden_value_scale
from harness.jobs.hidden import hidden_job


def hidden_capabilities(case: Case) -> set[str]:
    """What a target must declare to run ``case`` through the hidden-state entry point."""
    if case.cp != 1:
        raise ValueError(f"hidden-state checks take cp=1 cases, got cp={case.cp}")
    hidden_size(case)
    return {"hidden"} | ({"hidden_tp"} if case.tp > 1 else set()) | option_capabilities(case)


def _value_scale(case: Case) -> float:
    return hidden_value_scale(global_hidden(case), global_weight(case), case.temperature)


@replayable
def check_hidden_forward(case: Case, spec: str = "impl") -> None:
    """Log-probs and entropy from hidden states match the float64 oracle; TP ranks agree bit for bit."""
    require(spec, hidden_capabilities(case))
    assert_hidden_forward(case, run_ranks(hidden_job, case, spec))


def assert_hidden_forward(case: Case, results: list) -> None:
    """Every rank's log-probs/entropy against the oracle, each its own subtest."""
    ref, naive = hidden_reference(case), hidden_reference(case, precise=False)
    rounding, entropy_rounding = hidden_logit_rounding(global_hidden(case), global_weight(case), case.temperature)
    assert_replicated_values(
        case, results, ref, naive, scale=_value_scale(case), rounding={LOG_PROBS: rounding, ENTROPY: entropy_rounding}
    )


@replayable
def check_hidden_backward(case: Case, spec: str = "impl") -> None:
    """grad(hidden) (summed over TP, identical on every rank) and each rank's grad(weight) shard match the oracle."""
    require(spec, hidden_capabilities(case))
    assert_hidden_backward(case, run_ranks(hidden_job, case, spec))


def assert_hidden_backward(case: Case, results: list, *, weight_grad: bool = True) -> None:
    """grad(hidden) and the assembled grad(weight) against the oracle, each its own subtest.

    ``weight_grad=False`` leaves grad(weight) out: with other rows in the
    call (``prefix_rows``) it holds their part too, which the oracle of the
    Case's rows does not.
    """
    ref, naive = hidden_reference(case), hidden_reference(case, precise=False)
    a, b = probe_weights(case)
    upstream = float(a.abs().max()) + (float(b.abs().max()) if case.with_entropy else 0.0)
    hidden, weight = global_hidden(case), global_weight(case)
    scale_hidden, scale_weight = hidden_gradient_scales(hidden, weight, ref.grad_logits, case.temperature, upstream)
    with subtest(GRAD_HIDDEN):
        judge.gradient(
            replicated(results, "grad_hidden", kind=GRADIENT),
            ref.grad_hidden,
            naive.grad_hidden,
            what="grad(hidden)",
            scale=scale_hidden,
            working_dtype=case.torch_dtype,
        )
    if not weight_grad:
        return
    with subtest(GRAD_WEIGHT):
        judge.gradient(
            torch.cat([r["grad_weight"] for r in results], dim=0),
            ref.grad_weight,
            naive.grad_weight,
            what="grad(weight)",
            scale=scale_weight,
            working_dtype=case.torch_dtype,
        )


@replayable
def check_hidden_inputs_unmutated(case: Case, spec: str = "impl") -> None:
    """docs/bugs.md #2: forward+backward leaves hidden and the head shard untouched on every rank."""
    require(spec, hidden_capabilities(case))
    assert_inputs_unmutated(run_ranks(hidden_job, case, spec, inputs_only=True))


KEYS = ("log_probs", "entropy", "grad_hidden", "grad_weight")
KEY_OUTPUTS = {"log_probs": LOG_PROBS, "entropy": ENTROPY, "grad_hidden": GRAD_HIDDEN, "grad_weight": GRAD_WEIGHT}


@replayable
def check_hidden_chunk_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """Chunking changes the working set only: values and both gradients, on every rank.

    Bit for bit where promised (``exact``; None follows the target's
    ``bit_exact`` declaration, as ``harness.checks.invariances`` does): an
    online log-sum-exp over chunks rounds differently from one pass, so for
    any other target the contract is that both configurations match the
    oracle, and bit-identity is the hardening property.
    """
    require(spec, hidden_capabilities(case), every_example={"chunking"})
    chunked = run_ranks(hidden_job, case, spec)
    whole = run_ranks(hidden_job, case.with_(chunk_size=None), spec)
    if not promised_bit_exact(spec, exact):
        for results in (chunked, whole):
            assert_hidden_forward(case, results)
            assert_hidden_backward(case, results)
        return
    for key in KEYS:
        with subtest(KEY_OUTPUTS[key]):
            for rank, (x, y) in enumerate(zip(chunked, whole)):
                if x[key] is not None or y[key] is not None:
                    kind = GRADIENT if key.startswith("grad") else VALUE
                    what = f"rank {rank} {key}, chunk_size={case.chunk_size} vs one chunk"
                    judge.identical(x[key], y[key], what=what, kind=kind)


@replayable
def check_hidden_gate_invariance(case: Case, spec: str = "impl", *, exact: bool | None = None) -> None:
    """The gate changes only the graph: entropy values and log-probs the same with and without it.

    Bit for bit where promised (``exact``, as in ``check_hidden_chunk_invariance``);
    otherwise both configurations' values must match the oracle.
    """
    require(spec, hidden_capabilities(case), every_example={"entropy", "entropy_gate"})
    case = case.with_(with_entropy=True)
    on = run_ranks(hidden_job, case, spec, entropy_grad=True)
    off = run_ranks(hidden_job, case, spec, entropy_grad=False)
    if not promised_bit_exact(spec, exact):
        assert_hidden_forward(case, on)
        assert_hidden_forward(case, off)
    else:
        for key in (LOG_PROBS, ENTROPY):
            with subtest(key):
                for rank, (x, y) in enumerate(zip(on, off)):
                    judge.identical(y[key], x[key], what=f"rank {rank} {key}, gate off vs on")
    with subtest(GRAPH_FLAGS):
        for rank, (x, y) in enumerate(zip(on, off)):
            ensure(
                y["entropy_requires_grad"] is False,
                GRAPH,
                f"rank {rank}: entropy_grad=False returned entropy with a graph",
            )
            ensure(
                x["entropy_requires_grad"], GRAPH, f"rank {rank}: entropy_grad=True returned entropy without a graph"
            )
            ensure(y["log_probs_requires_grad"], GRAPH, f"rank {rank}: log-probs lost their graph with the gate off")


@replayable
def check_hidden_tp_consistency(case: Case, spec: str = "impl") -> None:
    """TP ranks return bit-identical log-probs, entropy and grad(hidden), and issue the same collectives.

    ``hidden`` is replicated, so every rank must step it the same way; a rank
    that returned its own partial ``g @ W_local`` (no TP sum) or summed in a
    rank-dependent order differs here. ``run_ranks`` judges the collective
    traces. Parity with the oracle at each tp is check_hidden_forward/backward's.
    """
    require(spec, hidden_capabilities(case))
    assert case.tp > 1, "TP consistency needs tp > 1"
    results = run_ranks(hidden_job, case, spec)
    for key in ("log_probs", "entropy", "grad_hidden"):
        with subtest(KEY_OUTPUTS[key]):
            replicated(results, key, kind=GRADIENT if key.startswith("grad") else VALUE)
