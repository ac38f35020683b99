"""``NemoRLTarget`` on each stand-in checkout (specs such as ``tests/fakes/nemo_rl/targets.py:fixed``)."""

from pathlib import Path

from harness.targets.nemo_rl.sampling import NemoRLSamplingTarget
from harness.targets.nemo_rl.token import NemoRLTarget

HERE = Path(__file__).resolve().parent


def fixed() -> NemoRLTarget:
    return NemoRLTarget(HERE / "fixed")


def one_hot() -> NemoRLTarget:
    return NemoRLTarget(HERE / "one_hot")


def sampling() -> NemoRLSamplingTarget:
    return NemoRLSamplingTarget(HERE / "sampling")


def sampling_per_shard() -> NemoRLSamplingTarget:
    return NemoRLSamplingTarget(HERE / "sampling_per_shard")
