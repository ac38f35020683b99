"""verl targets on the stand-in trees (specs such as ``tests/fakes/verl/targets.py:correct``)."""

from pathlib import Path

from harness.targets.verl.hidden import VerlFusedTorchTarget
from harness.targets.verl.token import VerlTarget

HERE = Path(__file__).resolve().parent


def correct() -> VerlTarget:
    return VerlTarget(HERE / "correct")


def view_writing() -> VerlTarget:
    return VerlTarget(HERE / "view_writing")


def chunk_rolled() -> VerlTarget:
    return VerlTarget(HERE / "chunk_rolled")


def fused_torch() -> VerlFusedTorchTarget:
    return VerlFusedTorchTarget(HERE / "correct")
