"""The NeMo-RL family record on each stand-in checkout (specs such as ``tests/fakes/nemo_rl/targets.py:fixed``).

``any_device`` is the record with ``cp_zigzag`` declared where the packed entry point takes a CP group, whatever
the device: the stand-ins' CP all-gather backward runs on a CPU (NeMo-RL's moves its index to CUDA, so the
record declares CP on CUDA only).
"""

from pathlib import Path

from harness.targets.nemo_rl.family import NEMO_RL
from tests.fakes import any_device as held_anywhere

HERE = Path(__file__).resolve().parent
ANY_DEVICE = held_anywhere.any_device(NEMO_RL)


def any_device(root):
    return ANY_DEVICE.target(root)


def fixed():
    return any_device(HERE / "fixed")


def one_hot():
    return any_device(HERE / "one_hot")


def sampling():
    return NEMO_RL.target(HERE / "sampling")


def sampling_per_shard():
    return NEMO_RL.target(HERE / "sampling_per_shard")


def policy():
    return NEMO_RL.target(HERE / "policy")


def hidden():
    return NEMO_RL.target(HERE / "hidden")
