"""verl family targets on the stand-in trees (specs such as ``tests/fakes/verl/targets.py:correct``)."""

from pathlib import Path

from harness.targets import registry

HERE = Path(__file__).resolve().parent


def correct():
    return registry.family("verl").target(HERE / "correct")


def view_writing():
    return registry.family("verl").target(HERE / "view_writing")


def chunk_rolled():
    return registry.family("verl").target(HERE / "chunk_rolled")
