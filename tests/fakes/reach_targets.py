"""TRL, Liger, TransformerEngine and ms-swift adapters pointed at the stand-in packages beside this file."""

import os
import shutil
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


def ms_swift_copy(tmp_path, *, layers=(), removed=(), moved=(), edits=()):
    """A copy of the ms-swift stand-in tree under ``tmp_path``: the fake trees named in ``layers`` laid over it, the
    files in ``removed`` gone, each ``(path, to)`` of ``moved`` moved and each ``(path, old, new)`` of ``edits`` made
    (``old`` must be there), with a target spec on it (a factory file, which spawned ranks import by path)."""
    root = tmp_path / "ms_swift"
    shutil.copytree(HERE / "ms_swift", root)
    for layer in layers:
        shutil.copytree(HERE / layer, root, dirs_exist_ok=True)
    for path in removed:
        (root / path).unlink()
    for path, to in moved:
        (root / to).parent.mkdir(parents=True, exist_ok=True)
        (root / path).rename(root / to)
    for path, old, new in edits:
        text = (root / path).read_text()
        assert old in text, f"{path} has no {old!r}"
        (root / path).write_text(text.replace(old, new))
    factory = tmp_path / "copied_ms_swift.py"
    factory.write_text(
        f"from tests.fakes.reach_targets import MsSwift\n\n\ndef T():\n    return MsSwift({str(root)!r})\n"
    )
    return root, f"{factory}:T"
