"""The one target grammar: what ``--target``, the gate, a history replay and a replay line all accept.

* ``impl`` / ``impl-triton``: this project's implementation (torch backend / Triton kernels);
* ``FAMILY=PATH``: a family's checkout (``slime=../slime``); the path is made absolute, so the
  spec printed in a replay line runs when pasted anywhere;
* ``FAMILY==X``: a family's PyPI release, installed WITHOUT dependencies into its own directory
  (``.packages/FAMILY-X``) the first time it is named, so two versions live side by side;
* ``package.module:attr`` or ``path/to/adapter.py:attr``: any adapter (docs/targets.md).

The families are the registry's (``harness/targets/registry.py``).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import ROOT

PACKAGES = ROOT / ".packages"


@dataclass(frozen=True)
class Spec:
    """A parsed target spec: ``kind`` is ``impl``, ``checkout``, ``release`` or ``adapter``."""

    text: str  # canonical: a checkout's path made absolute
    kind: str
    family: str | None = None
    where: str | None = None  # the checkout's path, or the release's version

    @property
    def directory(self) -> Path | None:
        """Where the family's files are: the checkout, or the release's install directory."""
        if self.kind == "checkout":
            return Path(self.where)
        if self.kind == "release":
            return PACKAGES / f"{self.family}-{self.where}"
        return None


def parse(text: str, *, present: bool = True) -> Spec:
    """``text`` as a ``Spec``; a malformed one is a ValueError listing every accepted form.

    ``present=False`` reads a spec whose checkout may be gone (a recorded run's): its path is not checked.
    """
    from harness.targets import registry

    if text in ("impl", "impl-triton"):
        return Spec(text, "impl")
    name, sep, value = text.partition("=")
    if sep and name in registry.names():
        if value.startswith("="):
            if registry.family(name).locate.pypi is None or not value[1:]:
                raise ValueError(f"{text}: {name} is not published on PyPI; give a checkout, {name}=PATH")
            return Spec(text, "release", name, value[1:])
        path = Path(value).expanduser().resolve()
        if not value or (present and not path.is_dir()):
            raise ValueError(f"{text}: {path} is not a directory (give the root of a {name} checkout)")
        return Spec(f"{name}={path}", "checkout", name, str(path))
    if ":" in text and not sep:
        return Spec(text, "adapter")
    releases = ", ".join(n for n in registry.names() if registry.family(n).locate.pypi)
    raise ValueError(
        f"unknown target {text!r}: expected 'impl', 'impl-triton', 'FAMILY=PATH' (a checkout; FAMILY one of "
        f"{', '.join(registry.names())}), 'FAMILY==X' (a PyPI release of {releases}), 'package.module:attr' or "
        "'path/to/adapter.py:attr'"
    )


def install(spec: Spec) -> Path | None:
    """A release spec's install directory, installed once with ``--no-deps`` (other kinds: ``directory``).

    ``--ignore-requires-python``: only the files under test are loaded, never the package's environment, so a
    release that asks for a newer Python (SkyRL 0.4.0: >=3.12) is still installed; code this Python cannot run is
    then the loader's ERROR. A release pip cannot install raises RuntimeError with pip's own error lines, which a
    history turns into an ERROR row instead of ending the replay.
    """
    directory = spec.directory
    if spec.kind != "release" or (directory.is_dir() and any(directory.iterdir())):
        return directory
    from harness.targets import registry

    requirement = f"{registry.family(spec.family).locate.pypi}=={spec.where}"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--ignore-requires-python"]
    done = subprocess.run([*command, "--target", str(directory), requirement], capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or [f"exit {done.returncode}"]
        raise RuntimeError(f"pip install --no-deps {requirement} failed: {' '.join(errors)}")
    return directory
