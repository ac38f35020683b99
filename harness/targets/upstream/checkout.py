"""Loading upstream code from a source checkout without running its package ``__init__`` files.

The families still on their old adapters use it (NeMo-RL, verl, TransformerEngine); a family on the kernel
loads through ``loader.py``, which presents every package of the tree this way and records what it ran. Their
packages' ``__init__`` files import the whole trainer (Ray, DeepEP, Megatron
Bridge, model registries), none of which the log-prob code needs, so the
parent packages are presented as plain namespace packages and only the
modules under test are executed from the checkout's files. The loaded modules
are swapped into ``sys.modules`` only while an adapter loads or calls them, so
several checkouts of one project can live in one process.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

from harness.targets.upstream.locate import revision  # noqa: F401 (the old adapters' name for it)

# ---- presenting a checkout's modules ----------------------------------------------------------


def _under(name: str, top: str) -> bool:
    return name == top or name.startswith(f"{top}.")


@contextlib.contextmanager
def as_sys_modules(modules: dict, top: str):
    """Present ``modules`` as the process's ``top*`` modules for a while; restore what was there after.

    Modules imported meanwhile (upstream's lazy imports) are kept in ``modules``.
    """
    saved = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _under(n, top)]}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name in [n for n in sys.modules if _under(n, top)]:
            modules[name] = sys.modules.pop(name)
        sys.modules.update(saved)


def namespace_package(name: str, directory: Path) -> types.ModuleType:
    """A package whose submodules load from ``directory`` and whose ``__init__`` is NOT executed."""
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(directory)]
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [str(directory)]
    return package


def namespace_packages(root: Path, names) -> dict:
    """``namespace_package`` for each dotted package name, its directory under ``root``."""
    return {name: namespace_package(name, root.joinpath(*name.split("."))) for name in names}
