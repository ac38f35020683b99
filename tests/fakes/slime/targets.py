"""The slime family on each stand-in checkout (specs such as ``tests/fakes/slime/targets.py:fused``)."""

from pathlib import Path

from harness.targets.slime.family import SLIME

HERE = Path(__file__).resolve().parent


def fused():
    return SLIME.target(HERE / "fused")


def split_inverted():
    return SLIME.target(HERE / "split_inverted")


def gateless():
    return SLIME.target(HERE / "gateless")
