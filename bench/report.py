"""Turn the pytest-benchmark JSON into ``reports/bench/speed.json`` with ratios to naive torch.

``python -m bench.report reports/bench/raw-speed.json``: one run, every figure
from the same run; ``speedup_vs_naive = naive mean / implementation mean``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path("reports/bench")


def speed_table(raw: dict) -> dict:
    means: dict = {}
    for bench in raw["benchmarks"]:
        info = bench["extra_info"]
        means.setdefault(info["implementation"], {})[info["shape"]] = bench["stats"]["mean"]
    table = {}
    for name, shapes in means.items():
        table[name] = {
            shape: {"mean_s": mean, "speedup_vs_naive": means["naive"][shape] / mean}
            for shape, mean in sorted(shapes.items())
        }
    return table


def main(path: str) -> None:
    table = speed_table(json.loads(Path(path).read_text()))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "speed.json").write_text(json.dumps(table, indent=2))
    shapes = sorted(next(iter(table.values())))
    print(f"{'implementation':18}" + "".join(f"{s:>26}" for s in shapes))
    for name, row in sorted(table.items()):
        cells = "".join(f"{row[s]['mean_s']:>12.3f} s ({row[s]['speedup_vs_naive']:>5.2f}x)" for s in shapes)
        print(f"{name:18}{cells}")
    print(f"wrote {OUT / 'speed.json'}")


if __name__ == "__main__":
    main(sys.argv[1])
