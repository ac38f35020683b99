"""Loading upstream code from a source checkout without running its package ``__init__`` files.

Shared by the adapters that take a checkout path (slime, NeMo-RL). Their
packages' ``__init__`` files import the whole trainer (Ray, DeepEP, Megatron
Bridge, model registries), none of which the log-prob code needs, so the
parent packages are presented as plain namespace packages and only the
modules under test are executed from the checkout's files. The loaded modules
are swapped into ``sys.modules`` only while an adapter loads or calls them, so
several checkouts of one project can live in one process.

The checked-out revision is read from ``.git`` directly (directory, worktree
file, packed refs): a checkout without a ``git`` binary still names itself.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path

# ---- the revision, read from the checkout's .git --------------------------------------------


def _git_dir(root: Path) -> Path | None:
    dot_git = root / ".git"
    if dot_git.is_dir():
        return dot_git
    if dot_git.is_file():
        text = dot_git.read_text().strip()
        if text.startswith("gitdir:"):
            return (root / text.partition(":")[2].strip()).resolve()
    return None


def _packed_ref(common: Path, name: str) -> str | None:
    packed = common / "packed-refs"
    if not packed.is_file():
        return None
    for line in packed.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == name:
            return parts[0]
    return None


def revision(root: Path) -> str | None:
    """The checked-out commit's short hash (9 digits), from ``.git`` (directory, worktree file, packed refs)."""
    git_dir = _git_dir(root)
    if git_dir is None or not (git_dir / "HEAD").is_file():
        return None
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    value = (git_dir / "HEAD").read_text().strip()
    for _ in range(8):
        if not value.startswith("ref:"):
            break
        name = value[4:].strip()
        found = next((base / name for base in (git_dir, common) if (base / name).is_file()), None)
        value = found.read_text().strip() if found else (_packed_ref(common, name) or "")
    return value[:9] if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", value) else None


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
