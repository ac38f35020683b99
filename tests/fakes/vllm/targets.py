"""``VllmSamplerTarget`` on each stand-in checkout (specs such as ``tests/fakes/vllm/targets.py:correct``)."""

from pathlib import Path

from harness.targets.vllm.sampler import VllmSamplerTarget

HERE = Path(__file__).resolve().parent


def correct() -> VllmSamplerTarget:
    return VllmSamplerTarget(HERE / "correct")


def unrenormalised() -> VllmSamplerTarget:
    return VllmSamplerTarget(HERE / "unrenormalised")
