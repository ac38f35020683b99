"""The library peers of ``nox -s bench``, through their harness adapters, where they load on the CPU.

* token level (``bench.implementations``): TRL's ``selective_log_softmax_and_entropy``
  (``trl-X``, its torch path on CPU tensors) and ms-swift's
  ``compute_logps_and_entropy_from_logits`` (``ms-swift-X``, which also needs a
  Megatron-LM checkout in ``LPH_MEGATRON_PATH``);
* hidden states (``bench.hidden_table``): TRL's ``ChunkedLogProbFunction``
  (``trl-chunked``, its torch tiles on CPU tensors).

Each is loaded from the installed package or its ``LPH_*_PATH``; one that does
not load is left out with its reason printed, and the session goes on. Liger's
and TransformerEngine's paths are Triton kernels: on a CPU they run in
Triton's interpreter, whose time and temporaries say nothing about the kernel,
so they are not benchmarked here. The per-row Python loops of TRL's and
ms-swift's token paths (a logsumexp per row; 512-row entropy chunks) are too
many ops for the fake-tensor sweep at 200k rows, so the memory table measures
them on real tensors at a few hundred rows and scales linearly
(``MEASURE_BY_PROXY``; the table says so per entry).
"""

from __future__ import annotations

from collections.abc import Callable

MEASURE_BY_PROXY = ("trl-", "ms-swift-")


def _loaded(label: str, build: Callable):
    try:
        return build()
    except (ImportError, FileNotFoundError, AttributeError, ModuleNotFoundError) as exc:
        print(f"{label} left out: {type(exc).__name__}: {exc}")
        return None


def _token_run(target) -> Callable:
    def run(logits, targets):
        options = {"tp_group": None, "chunk_size": None, "temperature": 1.0}
        return target.token_log_probs(logits, targets, with_entropy=True, entropy_grad=True, **options)

    return run


def token_peers() -> dict[str, Callable]:
    """``name -> run(logits, targets) -> (log_probs, entropy)`` for each token-level peer that loads."""
    from harness.targets import registry

    table = {}
    for label in ("trl", "ms_swift"):
        target = _loaded(label, lambda: registry.target(label))  # noqa: B023  (called at once)
        if target is not None:
            table[target.name] = _token_run(target)
    return table


def hidden_peers(case) -> dict[str, Callable]:
    """``name -> run(hidden, weight, targets)`` for each hidden-state peer that loads (``case``: the call's options)."""
    from harness.memory.hidden import target_runner
    from harness.targets import registry

    target = _loaded("trl-chunked", lambda: registry.target("trl"))
    return {} if target is None else {"trl-chunked": target_runner(target, case)}
