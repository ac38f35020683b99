"""The Triton kernels' launch choices, timed on a GPU (``python -m bench.gpu_tune --out DIR``).

``impl/triton/kernels.py`` picks a column tile (``block_columns``: a
function of ``V_local`` only, for chunk invariance) and warps
per program (``warps``). This times each kernel alone (``triton.testing.do_bench``)
for every tile in ``BLOCKS`` and warp count in ``WARPS`` at the bandwidth
table's shapes, the forward at one read and the backward at one read and one
write of the logits against the measured copy bandwidth, and profiles one
forward+backward of the whole Function (``torch.profiler``) to split its time
into the kernels and everything else. The kernels' choices are swapped in for
the run only (``chosen``); nothing else changes.

``--cpu``: the dry run under Triton's interpreter at a tiny shape (it shows
the script runs, not how fast). Writes ``DIR/tune.json`` after each shape.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import torch

from bench import gpu_bench, timing

OUT = Path("reports/gpu")
GB = 1e9
SHAPES = {name: gpu_bench.SHAPES[name] for name in gpu_bench.DEFAULT_SHAPES}  # the bandwidth table's
TINY = {name: gpu_bench.SHAPES[name] for name in gpu_bench.TINY[:1]}
BLOCKS = (1024, 2048, 4096, 8192)
WARPS = (4, 8, 16)


@contextlib.contextmanager
def chosen(kernels, block: int, warps: int):
    """The kernels' tile and warp count set to ``block`` and ``warps`` for the duration."""
    saved = kernels.block_columns, kernels.warps
    kernels.block_columns = lambda n_cols, widest: block
    kernels.warps = lambda _block, forward: warps
    try:
        yield
    finally:
        kernels.block_columns, kernels.warps = saved


def _ms(fn, cpu: bool) -> float:
    if cpu:
        started = time.perf_counter()
        fn()
        return (time.perf_counter() - started) * 1e3
    import triton.testing

    return triton.testing.do_bench(fn, warmup=10, rep=40)


def sweep(kernels, logits, targets, copy_bw: float, cpu: bool) -> list[dict]:
    """Each (tile, warps): forward and backward kernel milliseconds and fraction of the copy bandwidth."""
    rows, vocab = logits.shape
    nbytes = logits.numel() * logits.element_size()
    max_, stats = kernels.row_stats(logits, None, targets, 0, 1.0, True)
    shift = max_ + stats[:, 0].log()
    ones = torch.ones(rows, device=logits.device)
    entropy = torch.ones(rows, device=logits.device)
    dst = torch.empty_like(logits)
    out = []
    for block in BLOCKS[:1] if cpu else BLOCKS:
        for warps in WARPS[:1] if cpu else WARPS:
            with chosen(kernels, block, warps):
                fwd = _ms(lambda: kernels.row_stats(logits, None, targets, 0, 1.0, True), cpu)
                bwd = _ms(
                    lambda: kernels.write_grad(dst, logits, None, targets, shift, ones, ones, entropy, 0, 1.0), cpu
                )
            row = {
                "block": block,
                "warps": warps,
                "fwd_ms": fwd,
                "bwd_ms": bwd,
                "fwd_fraction": nbytes / (fwd / 1e3) / copy_bw,
                "bwd_fraction": 2 * nbytes / (bwd / 1e3) / copy_bw,
                "both_fraction": 3 * nbytes / ((fwd + bwd) / 1e3) / copy_bw,
            }
            print(
                f"  block {block:5} warps {warps:2}: fwd {fwd:7.3f} ms ({row['fwd_fraction']:.2f})"
                f"  bwd {bwd:7.3f} ms ({row['bwd_fraction']:.2f})  both {row['both_fraction']:.2f}",
                flush=True,
            )
            out.append(row)
    return out


def profile(logits, targets) -> dict:
    """One forward+backward of the Function under torch.profiler: kernel time by name, and the whole call's."""
    from impl.token_level import log_probs_and_entropy

    def once():
        grad_in = logits.detach().clone().requires_grad_()
        log_probs, entropy = log_probs_and_entropy(grad_in, targets)
        (log_probs.sum() + entropy.sum()).backward()

    for _ in range(3):
        once()
    timing.synchronize(logits.device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if logits.is_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        started = time.perf_counter()
        once()
        launched = time.perf_counter() - started
        timing.synchronize(logits.device)
        finished = time.perf_counter() - started
    averages = prof.key_averages()
    tables = {
        key: averages.table(sort_by=key, row_limit=14)
        for key in (("self_cuda_time_total", "self_cpu_time_total") if logits.is_cuda else ("self_cpu_time_total",))
    }
    for table in tables.values():
        print(table, flush=True)
    print(f"  whole call: {launched * 1e3:.3f} ms to launch, {finished * 1e3:.3f} ms to finish", flush=True)
    return {"cpu_launch_ms": launched * 1e3, "wall_ms": finished * 1e3, "tables": tables}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_tune", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--shapes", nargs="*", default=None, choices=list(SHAPES))
    parser.add_argument("--cpu", action="store_true", help="dry run under Triton's interpreter, tiny shape")
    args = parser.parse_args(argv)
    if args.cpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    chosen_device = timing.bench_device("bench.gpu_tune", args.cpu)
    if chosen_device is None:
        return 0
    dev, name = chosen_device
    from impl.triton import kernels

    copy_bw = timing.copy_bandwidth(dev, 2**20 if args.cpu else 2**31)
    report = {"device": name, "cpu_dry_run": args.cpu, "copy_bandwidth_GBps": copy_bw / GB, "shapes": {}}
    args.out.mkdir(parents=True, exist_ok=True)
    shapes = TINY if args.cpu else {k: SHAPES[k] for k in (args.shapes or SHAPES)}
    for shape, (rows, vocab, dtype) in shapes.items():
        print(f"{shape}:", flush=True)
        logits, targets = gpu_bench._inputs(rows, vocab, dtype, dev)
        report["shapes"][shape] = {
            "sweep": sweep(kernels, logits, targets, copy_bw, args.cpu),
            "profile": profile(logits, targets),
        }
        (args.out / "tune.json").write_text(json.dumps(report, indent=2))
        del logits, targets
    return 0


if __name__ == "__main__":
    sys.exit(main())
