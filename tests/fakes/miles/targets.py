"""The miles family on the stand-in checkout (spec ``tests/fakes/miles/targets.py:hub``)."""

from pathlib import Path

from harness.targets.slime.family import MILES

HERE = Path(__file__).resolve().parent


def hub():
    return MILES.target(HERE / "hub")
