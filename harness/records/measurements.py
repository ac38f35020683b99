"""The bench and GPU records: the newest ``nox -s bench`` and ``nox -s gpu`` runs, with what they were.

A speed figure is a fact about one machine at one load and one revision, so
every table here is rendered under that run's ``about.json`` (``bench/about.py``:
date, harness revision, device, load, torch); peaks come from the
deterministic tracker and do not depend on the load. The data are the
session's own JSON, copied by ``store.import_measurement``; the GPU tables are
the GPU scripts' own renderers (``bench.gpu_bench``, ``bench.gpu_calibration``),
so the record and the session's report cannot disagree.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.records import store
from harness.records.markdown import banner, table

GIB = 2**30


def _load(folder: Path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


def _header(title: str, kind: str, about: dict | None, how: str) -> list[str]:
    lines = banner(f"docs/records/data/{kind}/") + [f"# {title}", ""]
    if about is None:
        return lines + [f"No run recorded yet. {how}", ""]
    lines += [
        f"`{about['command']}` on {about['date']}, harness {about['harness']}: {about['device']}, "
        f"load {about['load']}, torch {about['torch']} (CUDA {about['cuda']}{_extras(about)}), "
        f"Python {about['python']}. {how}",
        "",
    ]
    return lines


def _extras(about: dict) -> str:
    """The GPU run's driver and Triton, where its ``about.json`` has them."""
    return "".join(
        f", {name} {about[key]}" for key, name in (("driver", "driver"), ("triton", "Triton")) if key in about
    )


def _hidden_table(hidden: dict) -> list[str]:
    """The hidden-state path's rows (the CPU bench's and the GPU's ``hidden.json`` alike)."""
    rows = [
        (label, name, f"{r['seconds']:.3f}", f"{r['seconds_min']:.3f}", f"{r['peak_bytes'] / 2**20:.1f}")
        for label, paths in hidden["shapes"].items()
        for name, r in paths.items()
    ]
    lines = [f"## The hidden-state path (chunk {hidden['chunk']}, {hidden['rounds']} interleaved rounds)", ""]
    lines += table(("shape (rows x H x V)", "path", "median s", "min s", "peak MiB"), rows) + [""]
    left_out = hidden.get("left_out", {})
    if left_out:
        lines += ["Left out: " + "; ".join(f"`{name}`: {why}" for name, why in left_out.items()), ""]
    ratios = [
        f"{label}: {r['time_median']:.2f}x the time, {r['peak']:.2f}x the peak"
        for label, r in hidden.get("impl_vs_unfused", {}).items()
    ]
    if ratios:
        lines += ["impl against the unfused path (one GEMM, then the token-level pass): " + "; ".join(ratios), ""]
    return lines


def _step_reason(step: dict) -> str:
    """Why a step did not end ok; a failed step's exit code with the last line it printed, which says why
    (``bench.gpu_hidden`` exits 1 naming what the machine's torch lacks)."""
    reason = step.get("reason") or ""
    said = [line for line in step.get("tail", []) if not line.startswith(f"=== {step['step']}:")]
    if step["outcome"] == "failed" and said:
        reason = f"{reason}: {said[-1].split(' === ')[0].strip()}"
    return reason


def _steps_table(steps: dict) -> list[str]:
    """The prepared run's steps (``bench.gpu_quick``): what each checked, its outcome, time and limit."""
    rows = [
        (s["step"], s["what"], s["outcome"], f"{s['wall_s']:.0f}", f"{s['limit_s']:g}", _step_reason(s))
        for s in steps["steps"]
    ]
    lines = ["## The prepared run's steps (`python -m bench.gpu_quick`)", ""]
    return lines + table(("step", "what", "outcome", "wall s", "limit s", "reason"), rows) + [""]


def render_bench(data: dict[str, dict]) -> str:
    lines = _header(
        "CPU bench: impl beside naive torch and the libraries' own paths",
        "bench",
        data.get("about"),
        "Run `nox -s bench` on a quiet machine, then `nox -s docs`. Times change with the machine and its load; "
        "peaks come from the live-storage tracker and do not.",
    )
    speed = data.get("speed", {})
    if speed:
        shapes = sorted(next(iter(speed.values())))
        rows = [
            (name, *(f"{row[s]['mean_s']:.3f} s ({row[s]['speedup_vs_naive']:.2f}x)" for s in shapes))
            for name, row in sorted(speed.items())
        ]
        lines += ["## Forward + backward, mean time (speed-up over naive torch)", ""]
        lines += table(("implementation", *shapes), rows) + [""]
    memory = data.get("memory", {})
    if memory:
        named = [label for label in next(iter(memory.values())) if not label.startswith("T=")]
        rows = [
            (name, *(f"{cases[label]['ratio_to_logits']:.3f} ({cases[label]['method']})" for label in named))
            for name, cases in sorted(memory.items())
        ]
        lines += ["## Peak memory at the historic scales, in logits' bytes", ""]
        lines += table(("implementation", *named), rows) + [""]
    hidden = data.get("hidden", {})
    if hidden.get("shapes"):
        lines += _hidden_table(hidden)
        real = [
            (name, r.get("error") or f"{r['peak_bytes'] / GIB:.3f} GiB, {r['chunks_of_logits']:.2f} chunks")
            for name, r in hidden.get("real_scale", {}).items()
        ]
        if real:
            lines += ["At the real scale (fake tensors): peak, and chunks of logits above inputs + gradients:", ""]
            lines += table(("path", "peak"), real) + [""]
    return "\n".join(lines).rstrip() + "\n"


def render_gpu(data: dict[str, dict]) -> str:
    lines = _header(
        "GPU results: impl on CUDA",
        "gpu",
        data.get("about"),
        "Run `nox -s gpu` on a CUDA machine (docs/usage.md), then `nox -s docs` with its reports/gpu/.",
    )
    if "steps" in data:
        lines += _steps_table(data["steps"])
    if "bench" in data:
        from bench.gpu_bench import markdown as bench_table

        lines += [bench_table(data["bench"]).replace("# ", "## ", 1)]
    if "calibration" in data:
        from bench.gpu_calibration import markdown as calibration_table

        calibration = data["calibration"]
        text = calibration_table(calibration["cases"], calibration["device"], calibration["margin"])
        lines += [text.replace("# ", "## ", 1)]
    if data.get("hidden", {}).get("shapes"):
        lines += _hidden_table(data["hidden"])
    return "\n".join(lines).rstrip() + "\n"


def pages(out: Path) -> dict[Path, str]:
    return {
        out / "bench.md": render_bench(_load(store.DATA / "bench")),
        out / "gpu.md": render_gpu(_load(store.DATA / "gpu")),
    }
