"""``SlimeTarget`` on each stand-in checkout (specs such as ``tests/fakes/slime/targets.py:fused``)."""

from pathlib import Path

from harness.targets.slime.adapter import SlimeTarget

HERE = Path(__file__).resolve().parent


def fused() -> SlimeTarget:
    return SlimeTarget(HERE / "fused")


def split_inverted() -> SlimeTarget:
    return SlimeTarget(HERE / "split_inverted")


def gateless() -> SlimeTarget:
    return SlimeTarget(HERE / "gateless")
