"""TRL, Liger, TransformerEngine and ms-swift adapters pointed at the stand-in packages beside this file."""

from pathlib import Path

from harness.targets.liger.family import ONE_RANK
from harness.targets.ms_swift.token import MsSwiftTarget
from harness.targets.trl.family import TRLFamilyTarget
from harness.targets.trl.token import TRLTritonTarget

HERE = Path(__file__).resolve().parent


class TRL(TRLFamilyTarget):
    def __init__(self):
        super().__init__(root=HERE / "trl")


class TRLTriton(TRLTritonTarget):
    def __init__(self):
        super().__init__(root=HERE / "trl")


def LigerOneRank():  # noqa: N802  (a target factory, named as the targets are)
    return ONE_RANK.target(HERE / "liger")


class MsSwift(MsSwiftTarget):
    def __init__(self):
        super().__init__(root=HERE / "ms_swift", megatron=HERE / "megatron")
