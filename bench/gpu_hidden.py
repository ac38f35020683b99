"""The hidden-state path on a GPU beside torch's chunked ``linear_cross_entropy``, time and peak (``bench.gpu_hidden``).

The CPU table's paths and timing scheme (``bench.hidden_table``: impl with and
without entropy, the unfused path, torch's chunked and reference
``linear_cross_entropy``; one warm-up, then ``ROUNDS`` interleaved rounds),
here on CUDA tensors at trainer-like shapes: impl's fixed-shape matmuls
(``impl.fixed_gemm``: 256-row blocks, one vocabulary leaf per GEMM, for the
same bits on every topology) against cuBLAS's one large GEMM per chunk. fp32,
torch's default matmul precision (no TF32) for every path alike.

Time: CUDA events (``bench.timing``). Peak: ``max_memory_allocated`` of one
forward+backward above what was allocated before its inputs were built, so
inputs, weight and gradients count, the convention of the CPU table's tracker.
Last, impl against torch's chunked path and against the unfused path (one
cuBLAS GEMM, then impl's token-level pass) as ratios (> 1: impl takes more).

``--cpu``: the CPU dry run of ``bench.gpu_quick`` (tiny shapes,
perf_counter, the tracker's peak): it shows the step runs, not how fast.
Writes ``DIR/hidden.json`` (after each shape); exits 1 when a path raises, or
when this torch has no chunked ``linear_cross_entropy`` (the comparison this
exists for): then the other paths are still measured, the torch ones listed
under ``left_out`` with the reason.
Without CUDA and without ``--cpu`` it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from bench import hidden_table, timing

OUT = Path("reports/gpu")
# rows x H x V, trainer-sized H and V; rows kept to what the quick run's 45 s allow (bench.gpu_quick).
SHAPES = {"4096x4096x32000": (4096, 4096, 32_000), "2048x4096x151936": (2048, 4096, 151_936)}
TINY = {"tiny-64x32x1000": (64, 32, 1000), "tiny-128x16x2048": (128, 16, 2048)}
BASELINES = ("torch-chunked", "unfused")
TORCH_PATHS = ("torch-chunked", "torch-reference")


def torch_chunked_missing() -> str | None:
    """Why this torch cannot run the chunked ``linear_cross_entropy`` (None when it can)."""
    if not hasattr(torch.nn.functional, "linear_cross_entropy") or not hasattr(torch.nn, "LinearCrossEntropyOptions"):
        return f"torch {torch.__version__} has no chunked linear_cross_entropy (torch.nn.LinearCrossEntropyOptions)"
    return None


def peak(run, shape, dev: torch.device) -> int:
    """Peak bytes of one forward+backward, inputs and gradients included: the allocator on a GPU, else the tracker."""
    if dev.type != "cuda":
        return hidden_table.peak_path(run, shape, fake=False).peak
    timing.free(dev)
    baseline = timing.start_peak(dev)
    inputs = hidden_table._inputs(*shape, dev)
    hidden_table._step(run, *inputs)
    measured = timing.peak_since(dev, baseline)
    del inputs
    return measured


def measure(paths: dict, shapes: dict, dev: torch.device, table: dict, out: Path) -> None:
    """Time and peak of ``paths`` at ``shapes`` into ``table``, written to ``out/hidden.json`` after each shape."""
    table.update(rounds=hidden_table.ROUNDS, chunk=hidden_table.CHUNK, shapes={})
    out.mkdir(parents=True, exist_ok=True)
    for label, shape in shapes.items():
        timed = hidden_table.time_paths(paths, shape, dev)
        for name, run in paths.items():
            median, fastest = timed[name]
            row = {"seconds": median, "seconds_min": fastest, "peak_bytes": peak(run, shape, dev)}
            table["shapes"].setdefault(label, {})[name] = row
            print(
                f"{label:18} {name:16} {median * 1e3:10.2f} ms (min {fastest * 1e3:.2f})  peak "
                f"{row['peak_bytes'] / 2**20:9.1f} MiB",
                flush=True,
            )
        for baseline in BASELINES:
            if baseline in paths:
                ratio = hidden_table._ratios(table["shapes"][label], baseline)
                table.setdefault(f"impl_vs_{baseline.replace('-', '_')}", {})[label] = ratio
                time_ratio, peak_ratio = ratio["time_median"], ratio["peak"]
                print(f"{label:18} impl / {baseline}: time {time_ratio:.2f}x (median), peak {peak_ratio:.2f}x")
        (out / "hidden.json").write_text(json.dumps(table, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_hidden", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="report folder (default reports/gpu)")
    parser.add_argument("--cpu", action="store_true", help="CPU dry run on tiny shapes: proves the step runs")
    args = parser.parse_args(argv)
    chosen = timing.bench_device("bench.gpu_hidden", args.cpu)
    if chosen is None:
        return 0
    dev, name = chosen
    missing = torch_chunked_missing()
    left_out = [path for path in TORCH_PATHS if missing is not None]
    paths = {path: run for path, run in hidden_table.PATHS.items() if path not in left_out}
    table = {"device": name, "cpu_dry_run": args.cpu, "left_out": dict.fromkeys(left_out, missing)}
    measure(paths, TINY if args.cpu else SHAPES, dev, table, args.out)
    print(f"wrote {args.out / 'hidden.json'}")
    if args.cpu:
        print(timing.CPU_DRY_RUN)
    if missing is not None:
        print(f"python -m bench.gpu_hidden: {missing}: impl measured against the unfused path only", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
