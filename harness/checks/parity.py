"""The checks: one function per contract, shared by properties, regressions and replay.

Each ``check_*(case, target)`` runs the Case on every rank against the target
(an adapter spec such as ``"impl"``), compares with the float64 oracle under
the tolerance policy or bit for bit where the math promises it, and raises
a ``CheckFailure`` naming its kind (``harness/checks/failure.py``) with the
diagnostics. Any failure carries the Case as JSON and a one-line replay
command as facts (and, for people, as exception notes), so a shrunk
Hypothesis counterexample can be rerun exactly, outside pytest.
"""

from __future__ import annotations

import functools
import sys

import torch
from hypothesis import reject
from hypothesis.control import currently_in_test_context
from hypothesis.errors import HypothesisException

from harness.cases import limits as case_limits
from harness.cases import policy
from harness.cases.case import Case
from harness.checks import diagnosis, expected, record
from harness.checks.failure import GRADIENT, GRAPH, LAYOUT, MUTATION, UNSUPPORTED, VALUE, CheckFailure, ensure, mark
from harness.checks.tolerance import assert_close, assert_identical, gradient_scale, value_scale
from harness.jobs.logits import packed_job, token_job, unmutated_job
from harness.ranks import rank_warnings
from harness.ranks.run import run_job
from harness.targets import Unsupported, load_target
from harness.targets.protocol import PolicyOptions


def replay_command(check: str, case: Case, spec: str) -> str:
    return f"python -m harness.replay {check} --target {spec} --case '{case.to_json()}'"


def replayable(fn):
    """Attach the Case, its replay command and the failure's evidence to any failure of a check.

    The evidence (``harness.checks.diagnosis``): the warnings every rank
    raised during the call, and which of the Case's conditions the failure
    needs (ablation; the reported example only).
    """

    @functools.wraps(fn)
    def wrapper(case: Case, spec: str = "impl", **kwargs):
        name = f"{fn.__module__}:{fn.__name__}"
        with rank_warnings.collecting() as seen:
            try:
                return fn(case, spec, **kwargs)
            except Unsupported:
                raise
            except BaseException as exc:
                replay = replay_command(name, case, spec)
                mark(exc, check=name, case=case.to_json(), replay=replay)  # the verdict's facts (the outer check wins)
                exc.add_note(f"Case: {case.to_json()}")  # for a person reading the traceback
                exc.add_note(f"Replay: {replay}")
                # A verdict on the target, not yet diagnosed (a check calling another check diagnoses once, inside).
                verdict = isinstance(exc, Exception) and not isinstance(exc, HypothesisException)
                if verdict and not hasattr(exc, "diagnosis"):
                    found = diagnosis.diagnose(wrapper, case, spec, exc, name) if diagnosis.should_ablate() else None
                    diagnosis.attach(exc, diagnosis=found, warnings=rank_warnings.merged(seen))
                raise

    return wrapper


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


def require(spec: str, capabilities) -> None:
    """Stop a check the target cannot run: UNSUPPORTED in the verdict, never a silent pass.

    Inside a Hypothesis example the example is rejected and counted in
    the running test's record (``harness.checks.record``): the property goes on with the examples the
    target does support, and the verdict table says how many were left out
    and why (a target without ``temperature`` is still checked on every
    example at temperature 1). If every example was rejected, the plugin
    reports the test UNSUPPORTED. Outside Hypothesis, under pytest, this is a
    skip whose reason starts with ``UNSUPPORTED:``; elsewhere it raises
    Unsupported.
    """
    target = load_target(spec)
    path = getattr(target, "capabilities_for", None)  # a family's path may lack an option its other paths have
    missing = set(capabilities) - set(path(set(capabilities)) if path else target.capabilities)
    if missing:
        _left_out(spec, missing)


def require_rows_within_limits(spec: str, case: Case) -> None:
    """Leave out (UNSUPPORTED, the bound named) a hidden-state example above the target's ``max_hidden_rows``.

    The bound is a target's declared cost on this machine (``harness.cases.limits``), not a capability of its
    code: the verdict says which bound, so a check never passes on examples it did not run.
    """
    bound = case_limits.active().get("max_hidden_rows")
    if bound is not None and case.rows > bound:
        _left_out(spec, {f"more than {bound} rows per call (its case_limits)"})


def _left_out(spec: str, missing) -> None:
    if currently_in_test_context():
        record.current().unsupported[(load_target(spec).name, tuple(sorted(missing)))] += 1
        reject()
    message = f"target {load_target(spec).name!r} does not support {sorted(missing)}"
    if "pytest" in sys.modules:
        skip = sys.modules["pytest"].skip.Exception(f"UNSUPPORTED: {message}", allow_module_level=True)
        raise mark(skip, kind=UNSUPPORTED, missing=sorted(missing))
    raise mark(Unsupported(message), kind=UNSUPPORTED, missing=sorted(missing))


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
            assert_identical(b, a, what=f"{key}[{i}] on rank {rank} vs rank 0", kind=kind)
    return first


def gather_samples(case: Case, results: list, key: str):
    """Full per-sample vectors from every CP rank's zigzag view (TP ranks of a CP rank must agree).

    Every response position must be returned by exactly one CP rank.
    """
    per_cp = [replicated(group, key) for group in cp_groups(case, results)]
    if per_cp[0] is None:
        ensure(all(values is None for values in per_cp), LAYOUT, f"{key}: returned by some CP ranks only")
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
    """Bug 2: the logits are bit-identical and their version counter unchanged after fwd+bwd."""
    for rank, result in enumerate(results):
        ensure(result["logits_unchanged"], MUTATION, f"rank {rank}: the target modified the logits' values")
        ensure(
            result["logits_version_delta"] == 0,
            MUTATION,
            f"rank {rank}: the logits' version counter moved by {result['logits_version_delta']} "
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
        assert_close(a, r, n, what=f"{what}[sample {i}]", scale=scale, working_dtype=case.torch_dtype)


def _assert_probe_grad(case: Case, results: list, ref, naive, a: list, b: list) -> None:
    """The assembled gradient of the probe loss (weights ``a``, ``b``) against the oracle; inputs untouched."""
    upstream = max_abs(a) + (max_abs(b) if case.with_entropy else 0.0)
    assert_close(
        assemble_grad(case, results),
        ref.grad,
        naive.grad,
        what="grad(logits)",
        scale=grad_scale(case, upstream),
        out_dtype=case.torch_dtype,
        kind=GRADIENT,
        working_dtype=case.torch_dtype,
    )
    assert_inputs_unmutated(results)


# ---- token level -------------------------------------------------------------


@replayable
def check_token_forward(case: Case, spec: str = "impl") -> None:
    """Log-probs and entropy of every row match the float64 oracle; TP ranks agree."""
    require(spec, required_capabilities(case, "token"))
    assert_token_forward(case, run_job(token_job, case, spec))


def assert_token_forward(case: Case, results: list) -> None:
    ref, naive = expected.token_reference(case), expected.token_reference(case, precise=False)
    scale = value_scale(case.global_logits(), case.temperature)
    assert_close(
        replicated(results, "log_probs"),
        ref.log_probs,
        naive.log_probs,
        what="log_probs",
        scale=scale,
        working_dtype=case.torch_dtype,
    )
    if case.with_entropy:
        assert_close(
            replicated(results, "entropy"),
            ref.entropy,
            naive.entropy,
            what="entropy",
            scale=scale,
            working_dtype=case.torch_dtype,
        )
    assert_inputs_unmutated(results)


@replayable
def check_token_backward(case: Case, spec: str = "impl") -> None:
    """Every rank's gradient shard of ``sum(a*lp + b*H)`` matches the oracle's column slice."""
    require(spec, required_capabilities(case, "token"))
    assert_token_backward(case, run_job(token_job, case, spec))


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
    assert_packed_forward(case, run_job(packed_job, case, spec))


def assert_packed_forward(case: Case, results: list) -> None:
    """Per-sample values gathered from every rank against the oracle; dropped positions 0; logits untouched."""
    ref, naive = expected.packed_reference(case), expected.packed_reference(case, precise=False)
    consumed = consumed_positions(case)
    for key in ("log_probs", "entropy") if case.with_entropy else ("log_probs",):
        values = gather_samples(case, results, key)
        _compare_samples(
            only_consumed(values, consumed),
            only_consumed(getattr(ref, key), consumed),
            only_consumed(getattr(naive, key), consumed),
            key,
            case,
        )
        assert_dropped_zero(values, consumed, key)
    assert_inputs_unmutated(results)


@replayable
def check_packed_backward(case: Case, spec: str = "impl") -> None:
    """Every rank's gradient shard of the probe loss matches the oracle's column slice."""
    require(spec, required_capabilities(case, "packed"))
    assert_packed_backward(case, run_job(packed_job, case, spec))


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
    gate = entropy_gate(case)
    gated = "entropy_gate" in load_target(spec).capabilities
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


@replayable
def check_inputs_unmutated(case: Case, spec: str = "impl") -> None:
    """Bug 2: forward+backward of the policy loss leaves the logits untouched on every rank.

    The logits are an activation here (``unmutated_job``), so an in-place
    write is reported as one, whatever torch would have raised on a leaf, or
    raised afterwards because of it.
    """
    require(spec, required_capabilities(case, "policy_loss"))
    assert_inputs_unmutated(run_job(unmutated_job, case, spec))
