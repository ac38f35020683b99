"""Where a family's upstream code is, and which version it is: the one root finder.

A family is found, in this order, at the path a SPEC names (``slime=PATH``),
at the directory its variable names (``LPH_SLIME_PATH``: a checkout, or the
``--target`` directory the gate installs ``skyrl==X`` into), or in the
installed package. The root must hold the family's ``marker`` file (a checkout
may keep its package under ``src/``), or, for a checkout in an ``older``
layout, that layout's marker under its subdirectory (SkyRL's ``skyrl-train/``
until 2026-02, package ``skyrl_train``); anything else is a clear error naming
the variable, the marker and how to install. Nothing is imported here: the
loader (``loader.py``) executes the files.

The version is the release's (its dist-info, else its ``pyproject.toml``);
the revision is the checkout's commit, read from ``.git`` directly (directory,
worktree file, packed refs), so a checkout without a ``git`` binary still
names itself.
"""

from __future__ import annotations

import importlib.util
import os
import re
import tomllib
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path


@dataclass(frozen=True)
class Locate:
    """How a family is found: its import name, a file every supported revision has, its variable, its PyPI name."""

    package: str  # the top-level import name upstream code lives under ("slime", "skyrl")
    marker: str  # a file under the root every supported revision has (relative, "/"-separated)
    variable: str  # LPH_<FAMILY>_PATH: a checkout or an install directory
    pypi: str | None = None  # the distribution on PyPI (None: checkouts only)
    older: tuple[tuple[str, str], ...] = ()  # (subdirectory, marker): an older layout's root in a checkout, its file

    @property
    def packages(self) -> tuple[str, ...]:
        """The top-level import names upstream code lives under: the package, then each older layout's."""
        return tuple(dict.fromkeys(path.rpartition("/")[2] for path in self.package_dirs()))

    def roots(self, base: Path) -> list[tuple[Path, str]]:
        """Where a checkout at ``base`` may keep the family's root, each with the marker it must hold there."""
        return [(base, self.marker), (base / "src", self.marker), *((base / sub, m) for sub, m in self.older)]

    def package_dirs(self) -> list[str]:
        """The package's directory in a checkout under each of those roots (a history's paths in git)."""
        return [self.package, f"src/{self.package}", *(f"{sub}/{marker.split('/')[0]}" for sub, marker in self.older)]

    def install_hint(self, family: str) -> str:
        if self.pypi:
            return f"`pip install --no-deps {self.pypi}==X` (or `python -m harness.gate {family}==X`)"
        return f"give a checkout: `{family}=PATH`"


@dataclass(frozen=True)
class Located:
    """One revision of a family on disk."""

    root: Path
    version: str  # a release version, else the checkout's short revision, else "unknown"
    revision: str | None  # the checkout's commit (9 digits), None for an install


def find(
    family: str, locate: Locate, where: str | os.PathLike | None = None, install_hint: str | None = None
) -> Located:
    """The family's root: ``where``, else ``$variable``, else the installed package (see the module docstring)."""
    given = where if where is not None else os.environ.get(locate.variable)
    if given:
        base = Path(given).expanduser().resolve()
        root = next((r for r, marker in locate.roots(base) if (r / marker).is_file()), None)
        if root is None:
            named = f"{family}={given}" if where is not None else f"{locate.variable}={given}"
            tried = " nor ".join((r.relative_to(base) / marker).as_posix() for r, marker in locate.roots(base))
            raise FileNotFoundError(
                f"{named}: no {tried} under it (a revision before the code under test, or not the root of a "
                f"{family} checkout)"
            )
    else:
        spec = importlib.util.find_spec(locate.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(
                f"{locate.package} is not installed: {install_hint or locate.install_hint(family)}, "
                f"or set {locate.variable} to a checkout"
            )
        root = Path(list(spec.submodule_search_locations)[0]).parent
        if not (root / locate.marker).is_file():
            raise FileNotFoundError(f"the installed {locate.package} has no {locate.marker}: not a supported version")
    commit = revision(root)
    return Located(root, release_version(root, locate.pypi or locate.package) or commit or "unknown", commit)


def release_version(root: Path, distribution: str) -> str | None:
    """``distribution``'s version at ``root``: its dist-info (an installed or ``--target`` wheel), else pyproject."""
    wanted = distribution.replace("_", "-").lower()
    for found in distributions(path=[str(root)]):
        if (found.metadata["Name"] or "").replace("_", "-").lower() == wanted:
            return found.version
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        version = tomllib.loads(pyproject.read_text()).get("project", {}).get("version")
        return str(version) if version else None
    return None


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
