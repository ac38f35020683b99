"""The vLLM family on each stand-in checkout (specs such as ``tests/fakes/vllm/targets.py:correct``)."""

from pathlib import Path

from harness.targets.vllm.family import VLLM

HERE = Path(__file__).resolve().parent


def correct():
    return VLLM.target(HERE / "correct")


def unrenormalised():
    return VLLM.target(HERE / "unrenormalised")
