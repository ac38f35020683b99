"""Where an upstream library's files are: a checkout or ``--target`` directory named by a variable, else the install.

The gate installs a PyPI SPEC (``liger==X``, ``trl==X``, ...) with ``--no-deps``
into its own directory and names it in ``LPH_<FAMILY>_PATH``; a ``family=PATH``
SPEC names a checkout the same way. Adapters find the library's root here, so
two versions can be gated side by side in one virtualenv and nothing of the
library is copied into this repository.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.metadata import distributions
from pathlib import Path


def package_root(import_name: str, variable: str, marker: Path, install_hint: str) -> Path:
    """The directory holding ``import_name``: ``$variable`` (checked for ``marker``) or the installed package's parent.

    A checkout keeps its package under a source folder (``src/``) in some
    libraries; the variable may name either the checkout or that folder.
    """
    override = os.environ.get(variable)
    if override:
        given = Path(override).expanduser().resolve()
        for root in (given, given / "src"):
            if (root / marker).is_file():
                return root
        raise FileNotFoundError(f"{variable}={override}: no {marker} under it (give the library's root)")
    spec = importlib.util.find_spec(import_name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{import_name} is not installed: {install_hint}, or set {variable} to a checkout")
    root = Path(list(spec.submodule_search_locations)[0]).parent
    if not (root / marker).is_file():
        raise FileNotFoundError(f"the installed {import_name} has no {marker}: this version is not supported")
    return root


def put_first_on_path(root: Path) -> None:
    """Make ``root`` the first place Python imports from, so its copy of the library wins over an installed one."""
    text = str(root)
    if text in sys.path:
        sys.path.remove(text)
    sys.path.insert(0, text)


def version(root: Path, distribution: str, fallback: str = "unknown") -> str:
    """``distribution``'s version at ``root`` (its dist-info: an installed or ``--target`` wheel), else ``fallback``."""
    wanted = distribution.replace("_", "-").lower()
    for found in distributions(path=[str(root)]):
        if (found.metadata["Name"] or "").replace("_", "-").lower() == wanted:
            return found.version
    return fallback
