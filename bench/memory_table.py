"""Peak memory of forward+backward per implementation, against T, under fake tensors.

``python -m bench.memory_table`` writes ``reports/bench/memory.json``
(implementation -> case -> peak bytes and ratio to the logits' bytes) and
``reports/bench/memory.png`` (peak GiB against T for V = 151,936 and 76,032,
with the 80 GB and 141 GB GPU capacities, an X where each implementation
crosses them). Nothing is allocated: the same live-storage tracker as the
memory properties, with the collectives of a single rank skipped (identities).
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.implementations import AsTarget, implementations, single_rank_collectives
from bench.peers import MEASURE_BY_PROXY
from harness.memory.logits import MemoryCase, measure_token_memory

OUT = Path("reports/bench")
GPUS = {"80 GB (H100)": 80e9, "141 GB (H200)": 141e9}
VOCABS = {"V=151936 (Qwen2)": 151_936, "V=76032 (slime #1951)": 76_032}
ROWS = [4096, 16_384, 35_840, 65_536, 131_072, 205_280, 262_144]
NAMED = {
    "slime-1951": MemoryCase(rows=205_280, vocab_local=76_032),
    "skyrl-1650": MemoryCase(rows=35_840, vocab_local=151_936),
}


PROXY_ROWS = 512


def _measure(run, case: MemoryCase, by_proxy: bool = False) -> dict:
    """Fake tensors at full scale; an implementation that cannot trace (data-dependent shapes), or one whose
    per-row loops are too many ops to trace (``by_proxy``), is measured on REAL tensors at ``PROXY_ROWS`` rows
    and scaled linearly, and says so."""
    proxy = MemoryCase(**{**case.__dict__, "rows": PROXY_ROWS})
    if by_proxy:
        report = measure_token_memory(proxy, AsTarget(run), fake=False)
        method = f"real tensors at T={PROXY_ROWS}, scaled linearly (per-row loops: bench.peers)"
    else:
        try:
            report = measure_token_memory(case, AsTarget(run))
            method = "fake tensors, full scale"
        except Exception as exc:  # noqa: BLE001 - any tracing failure falls back to a real measurement
            report = measure_token_memory(proxy, AsTarget(run), fake=False)
            method = f"real tensors at T={PROXY_ROWS}, scaled linearly ({type(exc).__name__} under fake tensors)"
    return {
        "rows": case.rows,
        "vocab": case.vocab_local,
        "ratio_to_logits": report.ratio,
        "peak_bytes": int(report.ratio * case.unit),
        "method": method,
    }


def measure_all() -> dict:
    table: dict = {}
    cases = dict(NAMED)
    cases.update(
        {f"T={rows},V={vocab}": MemoryCase(rows=rows, vocab_local=vocab) for vocab in VOCABS.values() for rows in ROWS}
    )
    for name, run in implementations(for_memory=True).items():
        with single_rank_collectives():
            for label, case in cases.items():
                table.setdefault(name, {})[label] = _measure(run, case, name.startswith(MEASURE_BY_PROXY))
    return table


def crossing_rows(cases: dict, vocab: int, capacity: float) -> int:
    """The T at which the peak reaches ``capacity`` (peaks are linear in T: bytes per row x T)."""
    largest = max((c for c in cases.values() if c["vocab"] == vocab), key=lambda c: c["rows"])
    return int(capacity / (largest["peak_bytes"] / largest["rows"]))


def plot(table: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(VOCABS), figsize=(13, 5))
    for axis, (title, vocab) in zip(axes, VOCABS.items()):
        for name, cases in sorted(table.items()):
            points = sorted((c["rows"], c["peak_bytes"]) for c in cases.values() if c["vocab"] == vocab)
            rows, peaks = zip(*points)
            line = axis.plot(rows, [p / 1e9 for p in peaks], marker="o", label=name)[0]
            for capacity in GPUS.values():
                axis.plot(
                    crossing_rows(cases, vocab, capacity),
                    capacity / 1e9,
                    marker="X",
                    markersize=11,
                    color=line.get_color(),
                )
        for label, capacity in GPUS.items():
            axis.axhline(capacity / 1e9, linestyle="--", color="grey")
            axis.text(ROWS[0], capacity / 1e9 * 1.03, label, color="grey")
        axis.set(
            title=f"forward+backward peak, fp32, {title}",
            xlabel="T (rows)",
            ylabel="peak live GB",
            xscale="log",
            yscale="log",
        )
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    table = measure_all()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "memory.json").write_text(json.dumps(table, indent=2))
    plot(table, OUT / "memory.png")
    print(f"{'implementation':18}" + "".join(f"{label:>16}" for label in NAMED) + "   (peak / logits bytes)")
    for name, cases in sorted(table.items()):
        print(f"{name:18}" + "".join(f"{cases[label]['ratio_to_logits']:>16.3f}" for label in NAMED))
        for capacity_label, capacity in GPUS.items():
            for vocab_label, vocab in VOCABS.items():
                limit = crossing_rows(cases, vocab, capacity)
                print(f"{'':18}exceeds {capacity_label} at T > {limit:,} ({vocab_label})")
    print(f"wrote {OUT / 'memory.json'} and {OUT / 'memory.png'}")


if __name__ == "__main__":
    main()
