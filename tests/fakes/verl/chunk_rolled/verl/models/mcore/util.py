"""Stand-in (tests only): the correct tree's thd helpers with the labels rolled per CP chunk (a label-shift defect)."""

from pathlib import Path

_CORRECT = Path(__file__).resolve().parents[4] / "correct" / "verl" / "models" / "mcore" / "util.py"
exec(compile(_CORRECT.read_text(), str(_CORRECT), "exec"))
ROLL = "per_chunk"
