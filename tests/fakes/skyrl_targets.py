"""The SkyRL family on the stand-in packages beside this file (loaded by path in every rank).

The record is held on any device (``any_device``): the stand-ins' CP gather runs on a CPU, SkyRL's moves its
index to CUDA, so the record declares CP on CUDA only.
"""

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from harness.targets.skyrl.family import SKYRL
from tests.fakes.any_device import any_device

HERE = Path(__file__).resolve().parent
RECORD = any_device(SKYRL)
PPO_UTILS = "skyrl/backends/skyrl_train/utils/ppo_utils.py"


def Fixed():  # noqa: N802 (a spec names it as it named the adapter class)
    return RECORD.target(HERE / "skyrl_fixed")


def Buggy():  # noqa: N802
    """The Functions with docs/bugs.md #2 and #3, the fused head's backward building one_hot too; token-level only."""
    return RECORD.target(HERE / "skyrl_buggy")


def InvertedGate():  # noqa: N802
    """The fixed stand-in's Functions and loss, with a wrapper whose entropy gate is inverted (docs/bugs.md #1)."""
    return RECORD.target(HERE / "skyrl_inverted_gate")


def self_reducing_tree(edit=None) -> Path:
    """``skyrl_fixed`` with ``skyrl_self_reducing/ppo_utils.py`` as its ppo_utils (SkyRL before #1296), ``edit``
    applied to that text; built once per content under the temporary directory, so every rank loads the same tree."""
    text = (HERE / "skyrl_self_reducing/ppo_utils.py").read_text()
    text = edit(text) if edit else text
    content = hashlib.sha256(text.encode())
    for path in sorted((HERE / "skyrl_fixed").rglob("*.py")):
        content.update(path.read_bytes())
    root = Path(tempfile.gettempdir()) / f"lph-skyrl-self-reducing-{content.hexdigest()[:12]}"
    if not root.exists():
        building = Path(tempfile.mkdtemp(prefix="lph-skyrl-building-"))
        shutil.copytree(HERE / "skyrl_fixed", building / "tree")
        (building / "tree" / PPO_UTILS).write_text(text)
        try:
            os.replace(building / "tree", root)
        except OSError:  # another process built it first
            shutil.rmtree(building / "tree")
        building.rmdir()
    return root


def _kl_without_gradient(text: str) -> str:
    """SkyRL before #1353: ``@torch.no_grad()`` on ``compute_approx_kl``."""
    return text.replace("def compute_approx_kl", "@torch.no_grad()\ndef compute_approx_kl", 1)


def SelfReducing():  # noqa: N802
    """The registry losses reducing themselves by ``reduce_loss`` (SkyRL before #1296)."""
    return RECORD.target(self_reducing_tree())


def SelfReducingKlNoGrad():  # noqa: N802
    """As ``SelfReducing``, its KL estimator under ``torch.no_grad()`` (SkyRL before #1353)."""
    return RECORD.target(self_reducing_tree(_kl_without_gradient))


FixedHidden, BuggyHidden = Fixed, Buggy  # the hidden-state path is the family's own entry point
