"""GPU forward+backward time and achieved bandwidth of impl/, naive torch and peers (``python -m bench.gpu_bench``).

Implementations: ``bench.implementations.implementations(for_memory=True)``
and ``bench.gpu_peers`` (impl/ on its Triton kernels, torch.compile of the
naive code, Liger-Kernel's cross entropy where installed), i.e. naive torch,
impl/ (torch backend) and impl/ with donation at the reference chunk of
1024 rows (the CPU speed table's cache-sized chunk is tuned to a CPU's cache:
a few rows per chunk at V=151,936, launch-bound on a GPU), and installed peers
(SkyRL, loaded from its package). All run on one rank, where every all-reduce
is the identity (``single_rank_collectives``), so no peer pays a host round
trip through gloo.

Timing: CUDA events around ``run(logits)`` + ``backward`` of
``sum(log_probs) + sum(entropy)``, after ``WARMUP`` untimed rounds; the
logits are re-cloned before every round (donation consumes them), outside the
timed region; median and min of ``REPS`` rounds, and the peak of
``torch.cuda.max_memory_allocated`` over them.

Bandwidth: the floor traffic of any exact implementation is three passes over
the logits (read once forward; read once and the gradient written once
backward, in the logits' dtype): ``3 * logits_bytes``. Achieved bandwidth is
that floor over the median time; the ceiling is the device's measured
device-to-device copy bandwidth (a ``COPY_BYTES`` copy, read + write counted),
so ``fraction_of_copy_bw`` near 1 means the fused kernels are memory-bound at
the floor.

Before timing, impl/ (and its donating variant) on each shape is checked on a
``CHECK_ROWS``-row slice against the float64 oracle under the tolerance policy
(``harness.checks.tolerance``; the slice's results come back to the CPU first):
log-probs, entropy and the logits' gradient, bf16 logits included.

Writes ``reports/gpu/bench.json`` and ``bench.md`` (again after each shape); exits 1 when impl/ fails
that check or raises. Without CUDA it prints why and exits 0, unless
``--cpu``: the CPU dry run of ``bench.gpu_quick`` (the same steps on CPU
tensors, ``time.perf_counter`` and a memcpy for the copy bandwidth, no peak;
the impl-triton entries under Triton's interpreter). Its figures only show
that every path runs; the report says "CPU dry run".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

from bench import timing
from bench.gpu_peers import gpu_implementations
from bench.implementations import implementations, single_rank_collectives
from harness.checks.tolerance import compare, gradient_scale, value_scale
from harness.ranks import device
from oracles import token

OUT = Path("reports/gpu")
WARMUP = 2
REPS = 10
COPY_BYTES = 2 * 2**30
COPY_BYTES_CPU = 64 * 2**20
CHECK_ROWS = 128
CHECKED = ("impl", "impl-donate", "impl-triton", "impl-triton-donate")
GB = 1e9
# name -> (rows, V, dtype); the CPU bench's shapes plus a trainer-sized one, in fp32 and bf16; a tiny pair for the
# CPU dry run (CHECK_ROWS rows, so the oracle check covers every row).
SHAPES = {
    "4096x32000": (4096, 32_000, "float32"),
    "4096x32000-bf16": (4096, 32_000, "bfloat16"),
    "1024x151936": (1024, 151_936, "float32"),
    "1024x151936-bf16": (1024, 151_936, "bfloat16"),
    "2048x8192": (2048, 8192, "float32"),
    "8192x151936": (8192, 151_936, "float32"),
    "8192x151936-bf16": (8192, 151_936, "bfloat16"),
    "tiny-128x1000": (128, 1000, "float32"),
    "tiny-128x1000-bf16": (128, 1000, "bfloat16"),
}
TINY = [name for name in SHAPES if name.startswith("tiny-")]
DEFAULT_SHAPES = [name for name in SHAPES if name not in TINY]


def _inputs(rows: int, vocab: int, dtype: str, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device=dev).manual_seed(0)
    base = (torch.randn(rows, vocab, generator=generator, device=dev) * 3).to(getattr(torch, dtype))
    targets = torch.randint(0, vocab, (rows,), generator=generator, device=dev)
    return base, targets


def time_forward_backward(run, base: torch.Tensor, targets: torch.Tensor, warmup: int, reps: int) -> dict:
    """Median and min seconds of forward+backward over ``reps`` timed rounds, and the peak allocated bytes
    (None on the CPU)."""
    dev = base.device
    times = []
    before = timing.start_peak(dev)
    watch = timing.Stopwatch(dev)
    for round_ in range(warmup + reps):
        logits = base.clone().requires_grad_()
        watch.start()
        log_probs, entropy = run(logits, targets)
        loss = log_probs.sum() if entropy is None else log_probs.sum() + entropy.sum()  # liger: no entropy
        loss.backward()
        seconds = watch.stop()
        if round_ >= warmup:
            times.append(seconds)
        del logits, log_probs, entropy, loss
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "peak_bytes_above_inputs": timing.peak_since(dev, before),
    }


def references(base: torch.Tensor, targets: torch.Tensor) -> tuple[dict, dict]:
    """The float64 oracle and the naive computation in the logits' dtype on the first ``CHECK_ROWS`` rows, on the
    CPU: what every implementation of a shape is held against (computed once per shape)."""
    cpu_logits, cpu_targets = base[:CHECK_ROWS].cpu(), targets[:CHECK_ROWS].cpu()

    def reference(precise: bool) -> dict:
        leaf = (cpu_logits.double() if precise else cpu_logits.clone()).requires_grad_()
        lp = (token.log_probs if precise else token.naive_log_probs)(leaf, cpu_targets)
        ent = (token.entropy if precise else token.naive_entropy)(leaf)
        (lp.double().sum() + ent.double().sum()).backward()
        return {"log_probs": lp.detach(), "entropy": ent.detach(), "grad": leaf.grad}

    return reference(True), reference(False)


def check_against_oracle(run, base: torch.Tensor, targets: torch.Tensor, expected: tuple | None = None) -> dict:
    """impl/ on the GPU against the float64 oracle (CPU) on the first ``CHECK_ROWS`` rows, tolerance policy;
    ``expected``: ``references(base, targets)``, when the caller already has them."""
    cpu_logits = base[:CHECK_ROWS].cpu()
    logits = base[:CHECK_ROWS].clone().requires_grad_()
    log_probs, entropy = run(logits, targets[:CHECK_ROWS])
    (log_probs.sum() + entropy.sum()).backward()
    actual = device.to_host({"log_probs": log_probs.detach(), "entropy": entropy.detach(), "grad": logits.grad})
    ref, naive = expected or references(base, targets)
    scale = value_scale(cpu_logits, 1.0)
    comparisons = [
        compare(actual[key], ref[key], naive[key], what=key, scale=scale) for key in ("log_probs", "entropy")
    ]
    comparisons.append(
        compare(
            actual["grad"],
            ref["grad"],
            naive["grad"],
            what="grad(logits)",
            scale=gradient_scale(cpu_logits, 1.0, 2.0),  # upstream weights 1 on log-probs and on entropy
            out_dtype=base.dtype,
        )
    )
    return {"ok": all(c.ok for c in comparisons), "comparisons": [str(c) for c in comparisons]}


def _error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def bench_shape(name: str, runs: dict, dev: torch.device, copy_bw: float, warmup: int, reps: int) -> dict:
    rows, vocab, dtype = SHAPES[name]
    base, targets = _inputs(rows, vocab, dtype, dev)
    logits_bytes = base.numel() * base.element_size()
    floor_bytes = 3 * logits_bytes
    entry = {
        "rows": rows,
        "vocab": vocab,
        "dtype": dtype,
        "logits_bytes": logits_bytes,
        "floor_bytes": floor_bytes,
        "floor_time_s": floor_bytes / copy_bw,
        "checks": {},
        "results": {},
    }
    expected = references(base, targets) if any(name in runs for name in CHECKED) else None
    for impl_name in CHECKED:
        if impl_name in runs:
            try:
                entry["checks"][impl_name] = check_against_oracle(runs[impl_name], base, targets, expected)
            except Exception as exc:  # noqa: BLE001 - reported as a failed check; the table still runs
                entry["checks"][impl_name] = {"ok": False, "comparisons": [f"raised {_error(exc)}"]}
    timing.free(dev)
    for impl_name, run in runs.items():
        try:
            result = time_forward_backward(run, base, targets, warmup, reps)
        except torch.OutOfMemoryError:
            result = {"error": "CUDA out of memory"}
        except Exception as exc:  # noqa: BLE001 - a failing peer is reported, the others still run
            result = {"error": _error(exc)}
        if "median_s" in result:
            achieved = floor_bytes / result["median_s"]
            result.update(achieved_GBps=achieved / GB, fraction_of_copy_bw=achieved / copy_bw)
        entry["results"][impl_name] = result
        timing.free(dev)
    naive = entry["results"].get("naive", {}).get("median_s")
    for result in entry["results"].values():
        if naive and "median_s" in result:
            result["speedup_vs_naive"] = naive / result["median_s"]
    del base, targets
    timing.free(dev)
    return entry


def markdown(report: dict) -> str:
    clock, copy = ("perf_counter", "memcpy") if report.get("cpu_dry_run") else ("CUDA events", "device-to-device copy")
    lines = [
        "# GPU forward+backward: impl/ vs naive torch and peers",
        "",
        *([timing.CPU_DRY_RUN, ""] if report.get("cpu_dry_run") else []),
        f"{report['device']}; {copy} bandwidth {report['copy_bandwidth_GBps']:.0f} GB/s (the ceiling); "
        f"{report['warmup']} warm-up + {report['reps']} timed rounds, {clock}.",
        "",
        "Floor traffic = 3 x logits bytes (read forward, read + gradient write backward); achieved = floor / median.",
        "",
        "| shape | dtype | implementation | median ms | min ms | vs naive | achieved GB/s | of copy bw | peak GiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, entry in report["shapes"].items():
        for name, r in entry["results"].items():
            if "error" in r:
                lines.append(f"| {shape} | {entry['dtype']} | {name} | {r['error']} | | | | | |")
                continue
            peak = r["peak_bytes_above_inputs"]
            lines.append(
                f"| {shape} | {entry['dtype']} | {name} | {r['median_s'] * 1e3:.2f} | {r['min_s'] * 1e3:.2f} "
                f"| {r.get('speedup_vs_naive', float('nan')):.2f}x | {r['achieved_GBps']:.0f} "
                f"| {r['fraction_of_copy_bw']:.0%} | {'-' if peak is None else f'{peak / 2**30:.2f}'} |"
            )
    for name, reason in report.get("left_out", {}).items():
        lines.append(f"\nLeft out: {name}: {reason}")
    lines += ["", "## impl/ against the float64 oracle (tolerance policy, first rows of each shape)", ""]
    for shape, entry in report["shapes"].items():
        for name, check in entry["checks"].items():
            lines.append(f"- {shape} {name}: {'pass' if check['ok'] else 'FAIL'}")
            lines += [f"  - `{line}`" for line in check["comparisons"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="report folder (default reports/gpu)")
    parser.add_argument("--shapes", nargs="*", default=None, choices=list(SHAPES), help="shapes to run")
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument(
        "--cpu", action="store_true", help=f"CPU dry run (default shapes {', '.join(TINY)}): proves the paths run"
    )
    args = parser.parse_args(argv)
    shapes = args.shapes or (TINY if args.cpu else DEFAULT_SHAPES)
    chosen = timing.bench_device("bench.gpu_bench", args.cpu)
    if chosen is None:
        return 0
    dev, name = chosen
    if args.cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the kernels on CPU tensors, before impl imports them
    copy_bw = timing.copy_bandwidth(dev, COPY_BYTES_CPU if args.cpu else COPY_BYTES)
    report = {
        "device": name,
        "cpu_dry_run": args.cpu,
        "copy_bandwidth_GBps": copy_bw / GB,
        "warmup": args.warmup,
        "reps": args.reps,
        "shapes": {},
    }
    runs, left_out = gpu_implementations(implementations(for_memory=True))
    report["left_out"] = left_out
    for name, reason in left_out.items():
        print(f"left out: {name}: {reason}")
    args.out.mkdir(parents=True, exist_ok=True)
    with single_rank_collectives():
        for shape in shapes:
            report["shapes"][shape] = bench_shape(shape, runs, dev, copy_bw, args.warmup, args.reps)
            for name, r in report["shapes"][shape]["results"].items():
                figure = r["error"] if "error" in r else f"{r['median_s'] * 1e3:9.2f} ms {r['achieved_GBps']:7.0f} GB/s"
                print(f"{shape:18} {name:14} {figure}", flush=True)
            # after every shape, so a run stopped at its time limit keeps the shapes it finished
            (args.out / "bench.json").write_text(json.dumps(report, indent=2))
            (args.out / "bench.md").write_text(markdown(report))
    print(f"wrote {args.out / 'bench.json'} and {args.out / 'bench.md'}")
    failed = [
        f"{shape} {name}"
        for shape, entry in report["shapes"].items()
        for name in CHECKED
        if name in runs and (not entry["checks"][name]["ok"] or "error" in entry["results"][name])
    ]
    if failed:
        print(f"impl/ failed its oracle check or raised on: {', '.join(failed)}", file=sys.stderr)
        return 1
    if args.cpu:
        print(timing.CPU_DRY_RUN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
