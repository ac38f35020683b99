"""What a measurement run was: ``python -m bench.about DIR COMMAND`` writes ``DIR/about.json``.

Speed figures belong to a machine, a load and a revision; a table without
them cannot be compared with the next one. The bench and GPU sessions write
this beside their tables, and ``nox -s docs`` (``harness.records.measurements``)
renders the record from both.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from harness.gate.specs import harness_revision


def driver() -> str:
    """The NVIDIA driver's version (``nvidia-smi``), or why it is not known: GPU speeds change with it."""
    if shutil.which("nvidia-smi") is None:
        return "unknown (no nvidia-smi)"
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        answer = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__})"
    return answer[0] if answer else "unknown (nvidia-smi printed nothing)"


def about(command: str) -> dict:
    cuda = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if cuda else f"CPU: {os.cpu_count()} cores"
    facts = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "harness": harness_revision(),
        "command": command,
        "device": f"{device}, {platform.machine()}",
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "python": platform.python_version(),
    }
    if cuda:
        facts["driver"] = driver()
    return facts


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bench.about DIR COMMAND", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "about.json").write_text(json.dumps(about(argv[1]), indent=2) + "\n")
    print(f"wrote {folder / 'about.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
