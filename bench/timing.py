"""Wall time and peak memory on either device, for the GPU benches and their CPU dry run.

On a GPU: CUDA events around the timed region and the caching allocator's
``max_memory_allocated``. On the CPU (``python -m bench.gpu_quick`` without a
GPU runs every step once in a CPU form, to prove the script end to end before
device time is spent): ``time.perf_counter`` and no allocator peak (the CPU
benches measure peaks with the live-storage tracker instead). CPU figures
say that the path runs, never how fast a GPU is.
"""

from __future__ import annotations

import gc
import os
import time

import torch

from harness.ranks import device

CPU_DRY_RUN = "CPU dry run: these figures show that every path runs; they are not GPU speeds."


def bench_device(prog: str, cpu: bool) -> tuple[torch.device, str] | None:
    """The device a GPU script measures on and its description; None (after saying why) when it must skip:
    no CUDA device and not ``cpu`` (the dry run)."""
    if cpu:
        return torch.device("cpu"), f"CPU ({os.cpu_count()} cores), torch {torch.__version__}"
    reason = device.no_cuda_reason()
    if reason is not None:
        print(f"python -m {prog}: {reason}: skipped")
        return None
    dev = torch.device("cuda", torch.cuda.current_device())
    return dev, f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, CUDA {torch.version.cuda}"


def synchronize(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Stopwatch:
    """``start()`` then ``stop()`` -> seconds: CUDA events on a GPU (the stream's time), else perf_counter."""

    def __init__(self, dev: torch.device):
        self.dev = dev
        if dev.type == "cuda":
            self._events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        synchronize(self.dev)
        if self.dev.type == "cuda":
            self._events[0].record()
        else:
            self._started = time.perf_counter()

    def stop(self) -> float:
        if self.dev.type != "cuda":
            return time.perf_counter() - self._started
        self._events[1].record()
        self._events[1].synchronize()
        return self._events[0].elapsed_time(self._events[1]) / 1e3


def copy_bandwidth(dev: torch.device, nbytes: int, reps: int = 10) -> float:
    """Copy bandwidth on ``dev`` in bytes/s, counting the read and the write of every byte (on the CPU: memcpy)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)
    watch = Stopwatch(dev)
    watch.start()
    for _ in range(reps):
        dst.copy_(src)
    seconds = watch.stop()
    del src, dst
    free(dev)
    return 2 * nbytes * reps / seconds


def free(dev: torch.device) -> None:
    """Drop what the last measurement left: Python garbage, then the CUDA cache (on a GPU)."""
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def start_peak(dev: torch.device) -> int:
    """Reset the allocator's peak; the bytes allocated now (the baseline ``peak_since`` subtracts). 0 on the CPU."""
    if dev.type != "cuda":
        return 0
    synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    return torch.cuda.memory_allocated(dev)


def peak_since(dev: torch.device, baseline: int) -> int | None:
    """The allocator's peak above ``baseline`` since ``start_peak``; None on the CPU (no allocator statistics)."""
    if dev.type != "cuda":
        return None
    synchronize(dev)
    return torch.cuda.max_memory_allocated(dev) - baseline
