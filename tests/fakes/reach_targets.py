"""TRL, Liger, TransformerEngine and ms-swift adapters pointed at the stand-in packages beside this file."""

import os
from pathlib import Path

from harness.targets.liger.family import ONE_RANK
from harness.targets.ms_swift.family import MS_SWIFT
from harness.targets.trl.family import TRL_TRITON

HERE = Path(__file__).resolve().parent


def TRLTriton():  # noqa: N802  (a target factory, named as the targets are)
    return TRL_TRITON.target(HERE / "trl")


def LigerOneRank():  # noqa: N802  (a target factory, named as the targets are)
    return ONE_RANK.target(HERE / "liger")


def MsSwift(root=None):  # noqa: N802  (a target factory, named as the targets are)
    """ms-swift's stand-in tree on the Megatron stand-in beside it (its second root: set in every rank that builds
    it, spawned ranks included)."""
    os.environ["LPH_MEGATRON_PATH"] = str(HERE / "megatron")
    return MS_SWIFT.target(root or HERE / "ms_swift")
