"""The parity checks: log-probs, entropy and gradients against the float64 oracle, at token and packed level.

Each ``check_*(case, target)`` runs the Case on every rank against the target
(an adapter spec such as ``"impl"``), judges each output on its own
(``harness.checks.subtests``) against the float64 oracle through the one
judge (``harness.checks.judge``), or bit for bit where the math promises it,
and raises a ``CheckFailure`` naming its kind (``harness/checks/failure.py``)
with the diagnostics. Any failure carries the Case as JSON and a one-line
replay command as facts (and, for people, as exception notes), so a shrunk
Hypothesis counterexample can be rerun exactly, outside pytest
(``harness.checks.running``).

Isolation: the target is handed a fresh copy of the logits
(``harness.jobs.inputs``), so a value or gradient check is never red for an
in-place write; writes are the inputs-unmutated check's finding alone
(``check_inputs_unmutated``, one level per entry point).
"""

from __future__ import annotations

import torch

from harness.cases import policy
from harness.cases.case import Case
from harness.checks import expected, judge
from harness.checks.failure import GRADIENT, GRAPH, LAYOUT, MUTATION, VALUE, CheckFailure, ensure
from harness.checks.running import (
    replay_command,
    replayable,
    require,
    require_rows_within_limits,
    run_ranks,
)
from harness.checks.subtests import ENTROPY, GRAD_LOGITS, GRAPH_FLAGS, INPUTS, LOG_PROBS, subtest
from harness.checks.tolerance import gradient_scale, value_scale
from harness.jobs.inputs import WRITES
from harness.jobs.logits import packed_job, policy_job, token_job
from harness.targets import load_target
from harness.targets.protocol import PolicyOptions

__all__ = ["replay_command", "replayable", "require", "require_rows_within_limits", "run_ranks"]


def option_capabilities(case: Case) -> set[str]:
    """The capabilities a Case's per-call options need at every entry point."""
    needed = set()
    if case.with_entropy:
        needed.add("entropy")
    if case.chunk_size is not None:
        needed.add("chunking")
    if case.temperature != 1.0:
        needed.add("temperature")
    return needed


def required_capabilities(case: Case, level: str) -> set[str]:
    """What a target must support to run ``case`` at ``level`` (token/packed/policy_loss)."""
    if level == "token" and case.cp != 1:
        raise ValueError(f"token-level checks take cp=1 cases (context parallelism is per sample), got cp={case.cp}")
    needed = {level} | option_capabilities(case)
    if case.cp_mode != "none":
        needed.add(f"cp_{case.cp_mode}")
    if level != "token":
        if case.qkv_format == "bshd":
            needed.add("bshd")
        if case.response_only:
            needed.add("response_only")
        if case.loss_mask_only:
            needed.add("loss_mask_only")
    if level == "policy_loss":
        needed |= PolicyOptions(**policy.option_values(case)).capabilities()
    return needed


def cp_groups(case: Case, results: list) -> list[list]:
    """Results grouped by CP rank, each group in TP order (rank = cp_rank * tp + tp_rank)."""
    return [results[c * case.tp : (c + 1) * case.tp] for c in range(case.cp)]


def assemble_grad(case: Case, results: list, key: str = "grad") -> torch.Tensor:
    """The global ``[rows, V]`` gradient from every rank's shard.

    TP shards sit side by side; each CP rank's rows go back to their global
    rows (the layout oracle's placement), and a padding row must have received
    exactly zero gradient.
    """
    shards = [torch.cat([r[key] for r in group], dim=1) for group in cp_groups(case, results)]
    if case.cp_mode == "none":
        return shards[0]
    full = torch.zeros(case.rows, case.vocab, dtype=shards[0].dtype)
    for cp_rank, shard in enumerate(shards):
        rows = case.local_rows(cp_rank)
        ensure(
            shard.shape[0] == len(rows),
            LAYOUT,
            f"CP rank {cp_rank}: gradient has {shard.shape[0]} rows, layout {len(rows)}",
        )
        held = [k for k, row in enumerate(rows) if row is not None]
        padding = [k for k, row in enumerate(rows) if row is None]
        ensure(bool((shard[padding] == 0).all()), GRADIENT, f"CP rank {cp_rank}: padding rows received a gradient")
        full[[rows[k] for k in held]] = shard[held]
    return full


def replicated(results: list, key: str, kind: str = VALUE):
    """A per-rank output that every rank in ``results`` must return identically; returns the first's."""
    first = results[0][key]
    for rank, result in enumerate(results[1:], start=1):
        other = result[key]
        if first is None or other is None:
            if not (first is None and other is None):
                raise CheckFailure(f"{key}: rank 0 returned {first!r}, rank {rank} {other!r}", kind=LAYOUT)
            continue
        firsts, others = (first, other) if isinstance(first, list) else ([first], [other])
        ensure(
            len(firsts) == len(others), LAYOUT, f"{key}: rank 0 has {len(firsts)} samples, rank {rank} {len(others)}"
        )
        for i, (a, b) in enumerate(zip(firsts, others)):
            judge.identical(b, a, what=f"{key}[{i}] on rank {rank} vs rank 0", kind=kind)
    return first


def gather_samples(case: Case, results: list, key: str, *, agree: bool = True):
    """Full per-sample vectors from every CP rank's zigzag view (TP ranks of a CP rank must agree).

    Every response position must be returned by exactly one CP rank. ``agree=False`` reads the first TP rank
    of each CP group and gives None when any of them returned none (an optional output: retained gradients).
    """
    if agree:
        per_cp = [replicated(group, key) for group in cp_groups(case, results)]
        if per_cp[0] is None:
            ensure(all(values is None for values in per_cp), LAYOUT, f"{key}: returned by some CP ranks only")
            return None
    else:
        per_cp = [group[0].get(key) for group in cp_groups(case, results)]
        if any(values is None for values in per_cp):
            return None
    out = []
    for i, response in enumerate(case.response_lengths):
        full = per_cp[0][i].new_full((response,), float("nan"))
        covered = torch.zeros(response, dtype=torch.long)
        for cp_rank, values in enumerate(per_cp):
            view = case.views(cp_rank)[i]
            ensure(
                values[i].shape[0] == len(view),
                LAYOUT,
                f"{key}[sample {i}] on CP rank {cp_rank}: {values[i].shape[0]} values for a zigzag view of {len(view)}",
            )
            full[view] = values[i]
            covered[view] += 1
        ensure(bool((covered == 1).all()), LAYOUT, f"{key}[sample {i}]: positions covered {covered.tolist()} times")
        out.append(full)
    return out


def assert_inputs_unmutated(results: list) -> None:
    """Bug 2: every input the target was handed is bit-identical, its version counter unchanged, after fwd+bwd.

    The inputs-unmutated checks alone call this (output ``INPUTS``): a value or gradient check hands the target
    a copy it may write without changing that check's verdict (``harness.jobs.inputs``).
    """
    with subtest(INPUTS):
        for rank, result in enumerate(results):
            for name, state in result[WRITES].items():
                whose = f"the {name}'" if name.endswith("s") else f"{name}'s"
                ensure(state["unchanged"], MUTATION, f"rank {rank}: the target modified {whose} values")
                delta = state["version_delta"]
                ensure(
                    delta == 0,
                    MUTATION,
                    f"rank {rank}: {whose} version counter moved by {delta} "
                    "(an in-place write on the input, the mechanism of SkyRL #1648)",
                )


def grad_scale(case: Case, upstream: float) -> float:
    return gradient_scale(case.global_logits(), case.temperature, upstream)


def max_abs(values) -> float:
    values = [v for v in values if v.numel()]
    return max((float(v.abs().max()) for v in values), default=0.0)


def _compare_samples(actual: list, ref: list, naive: list, what: str, case: Case) -> None:
    ensure(len(actual) == len(ref), LAYOUT, f"{what}: {len(actual)} samples returned, {len(ref)} expected")
    scale = value_scale(case.global_logits(), case.temperature)
    for i, (a, r, n) in enumerate(zip(actual, ref, naive)):
        judge.value(a, r, n, what=f"{what}[sample {i}]", scale=scale, working_dtype=case.torch_dtype)


def _assert_probe_grad(case: Case, results: list, ref, naive, a: list, b: list) -> None:
    """The assembled gradient of the probe loss (weights ``a``, ``b``) against the oracle."""
    upstream = max_abs(a) + (max_abs(b) if case.with_entropy else 0.0)
    with subtest(GRAD_LOGITS):
        judge.gradient(
            assemble_grad(case, results),
            ref.grad,
            naive.grad,
            what="grad(logits)",
            scale=grad_scale(case, upstream),
            working_dtype=case.torch_dtype,
        )


# ---- token level -------------------------------------------------------------


@replayable
def check_token_forward(case: Case, spec: str = "impl") -> None:
    """Log-probs and entropy of every row match the float64 oracle; TP ranks agree."""
    require(spec, required_capabilities(case, "token"))
    assert_token_forward(case, run_ranks(token_job, case, spec))


def assert_token_forward(case: Case, results: list) -> None:
    ref, naive = expected.token_reference(case), expected.token_reference(case, precise=False)
    assert_replicated_values(case, results, ref, naive, scale=value_scale(case.global_logits(), case.temperature))


def assert_replicated_values(case: Case, results: list, ref, naive, *, scale: float, label="", rounding=None) -> None:
    """Each row-value output (log-probs; entropy when computed), which every TP rank must return bit for bit,
    judged on its own against the reference; ``rounding``: an output's extra rounding term (the hidden path's)."""
    for key in (LOG_PROBS, ENTROPY) if case.with_entropy else (LOG_PROBS,):
        with subtest(key):
            judge.value(
                replicated(results, key),
                getattr(ref, key),
                getattr(naive, key),
                what=key + label,
                scale=scale,
                rounding=(rounding or {}).get(key, 0.0),
                working_dtype=case.torch_dtype,
            )


@replayable
def check_token_backward(case: Case, spec: str = "impl") -> None:
    """Every rank's gradient shard of ``sum(a*lp + b*H)`` matches the oracle's column slice."""
    require(spec, required_capabilities(case, "token"))
    assert_token_backward(case, run_ranks(token_job, case, spec))


def assert_token_backward(case: Case, results: list) -> None:
    ref, naive = expected.token_reference(case), expected.token_reference(case, precise=False)
    a, b = case.row_probe_weights()
    _assert_probe_grad(case, results, ref, naive, [a], [b])


# ---- packed level ------------------------------------------------------------


def consumed_positions(case: Case) -> list[torch.Tensor]:
    """Per sample, the positions whose values the target must return (mask 1 on loss-mask-only)."""
    if case.loss_mask_only:
        return [mask.bool() for mask in case.loss_masks()]
    return [torch.ones(r, dtype=torch.bool) for r in case.response_lengths]


def only_consumed(values: list, consumed: list) -> list:
    return [v[c] for v, c in zip(values, consumed)]


def assert_dropped_zero(values: list, consumed: list, what: str) -> None:
    for i, (v, c) in enumerate(zip(values, consumed)):
        dropped = v[~c]
        if not bool((dropped == 0).all()):
            raise CheckFailure(f"{what}[sample {i}]: dropped positions must read 0, got {dropped}", kind=VALUE)


@replayable
def check_packed_forward(case: Case, spec: str = "impl") -> None:
    """Per-sample response log-probs/entropy match the oracle on the packed layout."""
    require(spec, required_capabilities(case, "packed"))
    assert_packed_forward(case, run_ranks(packed_job, case, spec))


def assert_packed_forward(case: Case, results: list) -> None:
    """Per-sample values gathered from every rank against the oracle; dropped positions 0."""
    ref, naive = expected.packed_reference(case), expected.packed_reference(case, precise=False)
    consumed = consumed_positions(case)
    for key in (LOG_PROBS, ENTROPY) if case.with_entropy else (LOG_PROBS,):
        with subtest(key):
            values = gather_samples(case, results, key)
            ensure(values is not None, LAYOUT, f"{key} was requested but not returned")
            _compare_samples(
                only_consumed(values, consumed),
                only_consumed(getattr(ref, key), consumed),
                only_consumed(getattr(naive, key), consumed),
                key,
                case,
            )
            assert_dropped_zero(values, consumed, key)


@replayable
def check_packed_backward(case: Case, spec: str = "impl") -> None:
    """Every rank's gradient shard of the probe loss matches the oracle's column slice."""
    require(spec, required_capabilities(case, "packed"))
    assert_packed_backward(case, run_ranks(packed_job, case, spec))


def assert_packed_backward(case: Case, results: list) -> None:
    ref, naive = expected.packed_reference(case), expected.packed_reference(case, precise=False)
    a, b = case.probe_weights()
    _assert_probe_grad(case, results, ref, naive, a, b)


# ---- policy loss ------------------------------------------------------------------


def entropy_gate(case: Case) -> bool:
    """docs/math.md: the entropy keeps a graph iff it is computed and its coefficient is non-zero."""
    return case.with_entropy and case.entropy_coef != 0


def assert_entropy_gate(case: Case, results: list, spec: str = "impl") -> None:
    """Bug 1: ``requires_grad`` of every returned, non-empty entropy equals the gate, on every rank.

    Gate on (``with_entropy and entropy_coef != 0``): the entropy must carry
    its graph, or the bonus silently does nothing: every target. Gate off: it
    must not, but only for a target declaring ``entropy_gate``; one without
    the optimisation keeps the graph, which costs memory, not correctness.
    Empty outputs hold no value to differentiate; whether their flags agree
    across CP ranks is bug 4's check (``check_cp_requires_grad``).
    """
    with subtest(GRAPH_FLAGS):
        _assert_gate_flags(case, results, entropy_gate(case), "entropy_gate" in load_target(spec).capabilities)


def _assert_gate_flags(case: Case, results: list, gate: bool, gated: bool) -> None:
    for rank, result in enumerate(results):
        flags = result["entropy_requires_grad"]
        if flags is None:
            ensure(not case.with_entropy, LAYOUT, f"rank {rank}: entropy was requested but not returned")
            continue
        sizes = [v.numel() for v in result["entropy"]] if result.get("entropy") is not None else [1] * len(flags)
        for i, (flag, size) in enumerate(zip(flags, sizes, strict=True)):
            if size == 0 or (not gate and not gated):
                continue
            ensure(
                flag == gate,
                GRAPH,
                f"rank {rank}, sample {i}: entropy.requires_grad={flag} but the gate "
                f"(with_entropy={case.with_entropy} and entropy_coef={case.entropy_coef} != 0) is {gate}",
            )
        if result.get("log_probs_requires_grad") is not None:
            log_prob_sizes = [v.numel() for v in result.get("log_probs") or []] or [1] * len(flags)
            ensure(
                all(flag for flag, size in zip(result["log_probs_requires_grad"], log_prob_sizes) if size),
                GRAPH,
                f"rank {rank}: a returned non-empty log-prob has no graph",
            )
        if not gate and gated and result.get("entropy_grad_fn_is_none") is not None:
            with_graph = [
                i for i, (none, size) in enumerate(zip(result["entropy_grad_fn_is_none"], sizes)) if size and not none
            ]
            ensure(
                not with_graph, GRAPH, f"rank {rank}: gated-off entropy of sample(s) {with_graph} still has a grad_fn"
            )


# level -> the job that runs it (every level's job hands a fresh copy and reports writes, harness.jobs.inputs)
UNMUTATED_JOBS = {"token": token_job, "packed": packed_job, "policy_loss": policy_job}


@replayable
def check_inputs_unmutated(case: Case, spec: str = "impl", *, level: str = "policy_loss") -> None:
    """Bug 2: forward+backward at ``level`` (token, packed, policy_loss) leaves the logits untouched on every rank.

    The target is handed a copy of the logits (an activation, as a trainer's
    LM-head output), so an in-place write happens and is reported as one,
    whatever torch would have raised on a leaf; a target that raised after
    writing (a backward that found its saved tensor modified) is reported for
    the write. This is the only logits-level check that reports writes.
    """
    require(spec, required_capabilities(case, level))
    assert_inputs_unmutated(run_ranks(UNMUTATED_JOBS[level], case, spec, inputs_only=True))
