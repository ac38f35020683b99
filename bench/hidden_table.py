"""Hidden-state path: impl vs the unfused path vs torch's ``linear_cross_entropy``, time and peak, same shapes.

``python -m bench.hidden_table`` (run by ``nox -s bench``) writes
``reports/bench/hidden.json`` and prints a markdown table. Per shape
``(rows, H, V)``, fp32, one rank, forward + backward of ``sum(log_probs)``
(no entropy: torch's op has none; impl with entropy is listed beside it):

* ``impl``: ``impl.hidden_states`` (chunk 1024 rows, entropy off);
* ``impl+entropy``: the same with the entropy and its gradient;
* ``unfused``: ``hidden @ weight.T`` (full fp32 logits) then ``impl.token_level``;
* ``torch-chunked``: ``linear_cross_entropy(..., options=LinearCrossEntropyOptions(batch_chunk_size=1024))``;
* ``torch-reference``: ``linear_cross_entropy(..., options=None)`` (logits, then cross-entropy);
* ``skyrl-fused``: SkyRL's ``FusedLinearChunkedDistributedLogprob`` (chunk 1024) through
  the SkyRL family's hidden-state entry, when an installed ``skyrl`` (or ``LPH_SKYRL_PATH``) has it;
* ``trl-chunked``: TRL's ``ChunkedLogProbFunction`` (its own vocabulary tiles) where TRL loads (``bench.peers``).

Liger's fused linear cross entropy is not timed: on a CPU its kernels run in
Triton's interpreter, whose time says nothing about the kernel.

Time: one warm-up, then ``ROUNDS`` rounds that run every path once each,
interleaved, so a change in the machine's load reaches every path alike;
median and minimum (inputs rebuilt outside the timed region). Peak: the
live-storage tracker of ``harness.memory.logits`` on real tensors of the same shape,
inputs and gradients included. Then the real scale (T=205,280, H=4096,
V=151,936 at tp 8) under fake tensors for the paths that trace there, as
inputs + gradients + N chunks of fp32 logits. Last, impl against torch's
chunked path (the issue's bar: at least as lean and as fast), as ratios.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch

from bench.peers import hidden_peers
from bench.timing import Stopwatch
from harness.memory.hidden import REAL_SCALES, HiddenMemoryCase, measure_hidden_memory, target_runner
from impl.hidden_states import hidden_log_probs_and_entropy
from impl.token_level import log_probs_and_entropy

OUT = Path("reports/bench")
CHUNK = 1024
ROUNDS = 5
SHAPES = {"2048x256x16384": (2048, 256, 16_384), "1024x512x32000": (1024, 512, 32_000)}
CPU = torch.device("cpu")


def impl(hidden, weight, targets):
    return hidden_log_probs_and_entropy(hidden, weight, targets, chunk_size=CHUNK, with_entropy=False)


def impl_entropy(hidden, weight, targets):
    return hidden_log_probs_and_entropy(hidden, weight, targets, chunk_size=CHUNK, with_entropy=True)


def unfused(hidden, weight, targets):
    return log_probs_and_entropy(hidden @ weight.T, targets, chunk_size=CHUNK, with_entropy=False)


def _torch(options):
    def run(hidden, weight, targets):
        loss = torch.nn.functional.linear_cross_entropy(hidden, weight, targets, reduction="none", options=options())
        return -loss, None

    return run


PATHS = {
    "impl": impl,
    "impl+entropy": impl_entropy,
    "unfused": unfused,
    "torch-chunked": _torch(lambda: torch.nn.LinearCrossEntropyOptions(batch_chunk_size=CHUNK)),
    "torch-reference": _torch(lambda: None),
}


def _skyrl_fused():
    """SkyRL's fused path through its adapter (one rank), or None where no SkyRL with it is installed."""
    try:
        from harness.targets import registry

        target = registry.target("skyrl")
        if "hidden" not in target.capabilities:
            raise AttributeError(f"{target.name} has no fused LM head ({target.not_declared['hidden_log_probs']})")
    except (ImportError, FileNotFoundError, AttributeError) as exc:
        print(f"skyrl-fused left out: {type(exc).__name__}: {exc}")
        return None

    # target_runner reads only the call's options from the case (chunk size, entropy flags), not its shape.
    return target_runner(
        target, HiddenMemoryCase(rows=0, hidden_size=0, vocab_local=0, chunk_size=CHUNK, with_entropy=False)
    )


def _inputs(rows: int, hidden_size: int, vocab: int, dev: torch.device = CPU):
    g = torch.Generator(device=dev).manual_seed(0)
    hidden = (torch.randn(rows, hidden_size, generator=g, device=dev) / hidden_size**0.5).requires_grad_()
    weight = (torch.randn(vocab, hidden_size, generator=g, device=dev) * 3).requires_grad_()
    return hidden, weight, torch.randint(0, vocab, (rows,), generator=g, device=dev)


def _step(run, hidden, weight, targets) -> None:
    log_probs, entropy = run(hidden, weight, targets)
    loss = log_probs.sum() + (entropy.sum() if entropy is not None else 0.0)
    loss.backward()


def time_paths(paths: dict, shape, dev: torch.device = CPU) -> dict:
    """Per path: median and minimum seconds over ``ROUNDS`` interleaved rounds, after one warm-up round
    (``bench.timing.Stopwatch``: perf_counter on the CPU, CUDA events on a GPU)."""
    times: dict = {name: [] for name in paths}
    watch = Stopwatch(dev)
    for round_ in range(ROUNDS + 1):
        for name, run in paths.items():
            hidden, weight, targets = _inputs(*shape, dev)
            watch.start()
            _step(run, hidden, weight, targets)
            seconds = watch.stop()
            if round_:
                times[name].append(seconds)
            del hidden, weight, targets
    return {name: (statistics.median(t), min(t)) for name, t in times.items()}


def peak_path(run, shape, fake: bool):
    rows, hidden_size, vocab = shape
    case = HiddenMemoryCase(rows=rows, hidden_size=hidden_size, vocab_local=vocab, chunk_size=CHUNK)
    return measure_hidden_memory(case, run, fake=fake)


def _ratios(row: dict, baseline: str = "torch-chunked") -> dict:
    """impl against ``baseline`` (torch's chunked path unless named): > 1 means impl takes more."""
    impl, other = row["impl"], row[baseline]
    return {
        "time_median": impl["seconds"] / other["seconds"],
        "time_min": impl["seconds_min"] / other["seconds_min"],
        "peak": impl["peak_bytes"] / other["peak_bytes"],
    }


def main() -> None:
    paths = dict(PATHS)
    skyrl = _skyrl_fused()
    if skyrl is not None:
        paths["skyrl-fused"] = skyrl
    # TRL's chunk is a vocabulary width of its own (not the caller's rows): the call's chunk option is None.
    paths.update(
        hidden_peers(HiddenMemoryCase(rows=0, hidden_size=0, vocab_local=0, chunk_size=None, with_entropy=False))
    )
    table: dict = {"rounds": ROUNDS, "chunk": CHUNK, "shapes": {}, "real_scale": {}, "impl_vs_torch_chunked": {}}
    for label, shape in SHAPES.items():
        timed = time_paths(paths, shape)
        for name, run in paths.items():
            peak = peak_path(run, shape, fake=False).peak
            median, fastest = timed[name]
            row = {"seconds": median, "seconds_min": fastest, "peak_bytes": peak}
            table["shapes"].setdefault(label, {})[name] = row
            print(f"{label:16} {name:16} {median:8.3f} s (min {fastest:.3f})  peak {peak / 2**20:9.1f} MiB", flush=True)
        table["impl_vs_torch_chunked"][label] = _ratios(table["shapes"][label])
    real = REAL_SCALES["qwen-tp8-fp32"]
    for name in ("impl+entropy", "impl", "unfused", "torch-chunked", "skyrl-fused", "trl-chunked"):
        if name not in paths:
            continue
        try:
            report = peak_path(paths[name], (real.rows, real.hidden_size, real.vocab_local), fake=True)
            table["real_scale"][name] = {"peak_bytes": report.peak, "chunks_of_logits": report.chunks_above_floor}
            print(f"real scale {name:16} {report}", flush=True)
        except Exception as exc:  # noqa: BLE001 - a path that cannot trace under fake tensors is reported, not fatal
            table["real_scale"][name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            print(f"real scale {name:16} not measurable under fake tensors: {table['real_scale'][name]['error']}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "hidden.json").write_text(json.dumps(table, indent=2))
    print(f"\nCPU, {ROUNDS} interleaved rounds, fp32, one rank, chunk {CHUNK}; times are noisy on a shared machine.")
    print("\n| shape (rows x H x V) | path | fwd+bwd median (s) | min (s) | peak (MiB) |\n|---|---|---|---|---|")
    for label, rows in table["shapes"].items():
        for name, row in rows.items():
            print(
                f"| {label} | {name} | {row['seconds']:.3f} | {row['seconds_min']:.3f} | "
                f"{row['peak_bytes'] / 2**20:.1f} |"
            )
    print("\n| real scale (fake tensors) | peak (GiB) | inputs + gradients + N chunks of logits |\n|---|---|---|")
    for name, row in table["real_scale"].items():
        if "error" in row:
            print(f"| {name} | {row['error']} | |")
        else:
            print(f"| {name} | {row['peak_bytes'] / 2**30:.3f} | {row['chunks_of_logits']:.2f} |")
    print("\nimpl / torch chunked (> 1: impl takes more):")
    for label, ratio in table["impl_vs_torch_chunked"].items():
        print(
            f"  {label}: time {ratio['time_median']:.2f}x (median), {ratio['time_min']:.2f}x (min); "
            f"peak {ratio['peak']:.2f}x"
        )
    print(f"wrote {OUT / 'hidden.json'}")


if __name__ == "__main__":
    main()
