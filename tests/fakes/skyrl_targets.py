"""The SkyRL family on the stand-in packages beside this file (loaded by path in every rank)."""

from pathlib import Path

from harness.targets.skyrl.family import SKYRL

HERE = Path(__file__).resolve().parent


def Fixed():  # noqa: N802 (a spec names it as it named the adapter class)
    return SKYRL.target(HERE / "skyrl_fixed")


def Buggy():  # noqa: N802
    """The Functions with docs/bugs.md #2 and #3, the fused head's backward building one_hot too; token-level only."""
    return SKYRL.target(HERE / "skyrl_buggy")


def InvertedGate():  # noqa: N802
    """The fixed stand-in's Functions and loss, with a wrapper whose entropy gate is inverted (docs/bugs.md #1)."""
    return SKYRL.target(HERE / "skyrl_inverted_gate")


FixedHidden, BuggyHidden = Fixed, Buggy  # the hidden-state path is the family's own entry point
