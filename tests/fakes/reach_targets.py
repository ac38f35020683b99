"""TRL, Liger, TransformerEngine and ms-swift adapters pointed at the stand-in packages beside this file."""

from pathlib import Path

from harness.targets.liger.family import ONE_RANK
from harness.targets.ms_swift.token import MsSwiftTarget
from harness.targets.trl.family import TRL_TRITON

HERE = Path(__file__).resolve().parent


def TRLTriton():  # noqa: N802  (a target factory, named as the targets are)
    return TRL_TRITON.target(HERE / "trl")


def LigerOneRank():  # noqa: N802  (a target factory, named as the targets are)
    return ONE_RANK.target(HERE / "liger")


class MsSwift(MsSwiftTarget):
    def __init__(self):
        super().__init__(root=HERE / "ms_swift", megatron=HERE / "megatron")
