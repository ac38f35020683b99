"""``MilesTarget`` on the stand-in checkout (spec ``tests/fakes/miles/targets.py:hub``)."""

from pathlib import Path

from harness.targets.slime.adapter import MilesTarget

HERE = Path(__file__).resolve().parent


def hub() -> MilesTarget:
    return MilesTarget(HERE / "hub")
