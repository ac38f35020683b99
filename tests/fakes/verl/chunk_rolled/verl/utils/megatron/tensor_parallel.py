"""Stand-in (tests only): the correct tree's tensor_parallel.py (this tree differs in its thd helpers only)."""

from pathlib import Path

_CORRECT = Path(__file__).resolve().parents[4] / "correct" / "verl" / "utils" / "megatron" / "tensor_parallel.py"
exec(compile(_CORRECT.read_text(), str(_CORRECT), "exec"))
