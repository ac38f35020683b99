"""The policy stand-in tree's ``model_utils``: the correct stand-in's Functions (executed from its file)."""

from pathlib import Path

_FIXED = Path(__file__).resolve().parents[3] / "fixed" / "nemo_rl" / "distributed" / "model_utils.py"
exec(compile(_FIXED.read_text(), str(_FIXED), "exec"))  # noqa: S102 - the family's log-prob Functions
