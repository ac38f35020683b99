"""Where an upstream library's files are: a checkout or ``--target`` directory named by a variable, else the install.

The gate installs a PyPI SPEC (``liger==X``, ``trl==X``, ...) with ``--no-deps``
into its own directory and names it in ``LPH_<FAMILY>_PATH``; a ``family=PATH``
SPEC names a checkout the same way. Adapters find the library's root here, so
two versions can be gated side by side in one virtualenv and nothing of the
library is copied into this repository.
"""

from __future__ import annotations

from pathlib import Path

from harness.targets.upstream.locate import Locate, find, release_version


def package_root(import_name: str, variable: str, marker: Path, install_hint: str) -> Path:
    """The directory holding ``import_name``: ``$variable`` (checked for ``marker``) or the installed package's parent
    (``locate.find``, the one root finder; a checkout may keep its package under ``src/``)."""
    return find(import_name, Locate(import_name, str(marker), variable), install_hint=install_hint).root


def version(root: Path, distribution: str, fallback: str = "unknown") -> str:
    """``distribution``'s version at ``root`` (its dist-info: an installed or ``--target`` wheel), else ``fallback``."""
    return release_version(root, distribution) or fallback
