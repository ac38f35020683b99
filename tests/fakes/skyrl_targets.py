"""SkyRL adapters pointed at the stand-in packages beside this file (loaded by path in every rank)."""

from pathlib import Path

from harness.targets.skyrl.hidden import SkyRLHiddenTarget
from harness.targets.skyrl.token import SkyRLTarget

HERE = Path(__file__).resolve().parent


class Fixed(SkyRLTarget):
    def __init__(self):
        super().__init__(root=HERE / "skyrl_fixed")


class Buggy(SkyRLTarget):
    def __init__(self):
        super().__init__(root=HERE / "skyrl_buggy")


class InvertedGate(SkyRLTarget):
    """The fixed stand-in's Functions and loss, with a wrapper whose entropy gate is inverted (docs/bugs.md #1)."""

    def __init__(self):
        super().__init__(root=HERE / "skyrl_inverted_gate")


class FixedHidden(SkyRLHiddenTarget):
    def __init__(self):
        super().__init__(root=HERE / "skyrl_fixed")


class BuggyHidden(SkyRLHiddenTarget):
    """The fused Function whose backward builds one_hot over the vocabulary (docs/bugs.md #3)."""

    def __init__(self):
        super().__init__(root=HERE / "skyrl_buggy")
