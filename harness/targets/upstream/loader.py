"""The one loader: executes a revision's upstream files from its root and records every file it executed.

``Loader(root, packages, placeholders)`` presents the directories of the
family's top-level ``packages`` under ``root`` as packages whose ``__init__``
files never run (a trainer's ``__init__`` imports Ray, DeepEP, Megatron Bridge
and model registries, none of which the log-prob code needs), and executes
each module it is asked for, and each upstream module those import, from its
file. The modules live in the loader's own ``sys.modules`` view, swapped in
only while it loads or while the family is called (``present()``), so several
revisions of one project live in one process. Placeholders
(``placeholders.py``) answer the third-party imports the record declares.

Every upstream file executed, at load time and at call time (an import
inside an upstream function), is recorded in ``executed``: what a history
replay keys revisions by, and replays commits of (no hand-written list).

``symbol`` / ``method`` / ``inner`` load one definition of a file (a method's
closure, for ``inner``) without the rest of the module (``symbols.py``: the
statements it needs, executed from the file's own syntax tree) for a file
whose module-level imports pull a whole trainer; the file is recorded too,
with what was loaded of it (``alone``), so a history keys it by that part.

A module none of whose named files exists is ``MissingUpstream``: an ERROR of
the run naming every file tried, never a skip.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path

from harness.targets.upstream import symbols
from harness.targets.upstream.placeholders import provided


class MissingUpstream(LookupError):
    """A file or symbol the family record names is not in this revision (a load ERROR, never UNSUPPORTED)."""

    failure_kind = "load"  # harness.checks.failure.LOAD: the gate reads it as ERROR, never as the check's FAIL


def _under(name: str, tops) -> bool:
    return name.split(".")[0] in tops


class _Tree(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """First on ``sys.meta_path`` while a loader is present: the root's packages, ``__init__`` files never run."""

    def __init__(self, loader: Loader):
        self.loader = loader

    def find_spec(self, fullname, path=None, target=None):
        if not _under(fullname, self.loader.packages):
            return None
        base = self.loader.root.joinpath(*fullname.split("."))
        if base.is_dir() and ((base / "__init__.py").is_file() or not base.with_suffix(".py").is_file()):
            spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            spec.submodule_search_locations = [str(base)]
            return spec
        if base.with_suffix(".py").is_file():
            self.loader.record(base.with_suffix(".py"))
            return importlib.util.spec_from_file_location(fullname, base.with_suffix(".py"))
        return None

    def create_module(self, spec):
        package = types.ModuleType(spec.name)
        package.__path__ = list(spec.submodule_search_locations)
        return package

    def exec_module(self, module):
        return None


class Loader:
    """One revision's upstream code: modules from ``root``, placeholders, the record of what executed."""

    def __init__(self, root: Path, packages, placeholders=()):
        self.root = Path(os.path.abspath(root))
        self.packages = tuple(packages)
        self.placeholders = tuple(placeholders)
        self.modules: dict[str, types.ModuleType] = {}
        self._executed: set[str] = set()  # files executed whole (imported) or read
        self._alone: dict[str, set[str]] = {}  # file -> the definitions loaded alone from it (symbols.executed_digest)
        for placeholder in self.placeholders:
            if placeholder.scope == "process":  # Megatron's parallel state: looked up again after a call returns
                placeholder.build(placeholder.name)

    def record(self, path: Path, selector: str | None = None) -> None:
        """``path`` executed (or read) whole, or, with ``selector``, only that definition of it loaded alone."""
        relative = Path(path).relative_to(self.root).as_posix()  # a symlinked file is keyed where it is named
        if selector is None:
            self._executed.add(relative)
        else:
            self._alone.setdefault(relative, set()).add(selector)

    @property
    def executed(self) -> tuple[str, ...]:
        """Every upstream file executed so far (whole or in part), relative to the root, sorted."""
        return tuple(sorted({*self._executed, *self._alone}))

    @property
    def alone(self) -> dict[str, tuple[str, ...]]:
        """The files of which only some definitions ran (never executed whole or read): file -> those selectors."""
        return {path: tuple(sorted(s)) for path, s in sorted(self._alone.items()) if path not in self._executed}

    def file_of(self, module: str) -> Path:
        return self.root.joinpath(*module.split(".")).with_suffix(".py")

    @contextlib.contextmanager
    def present(self, scopes=("call",)):
        """The loader's modules as the process's modules of its packages (and the ``scopes`` placeholders)."""
        saved = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _under(n, self.packages)]}
        sys.modules.update(self.modules)
        finder = _Tree(self)
        sys.meta_path.insert(0, finder)
        try:
            with provided(self.placeholders, scopes):
                yield
        finally:
            sys.meta_path.remove(finder)
            for name in [n for n in sys.modules if _under(n, self.packages)]:
                self.modules[name] = sys.modules.pop(name)
            sys.modules.update(saved)

    def module(self, *alternatives: str) -> types.ModuleType:
        """The first of ``alternatives`` (dotted names: a module and its older forms) whose file exists, executed."""
        found = self.find(*alternatives)
        if found is None:
            tried = ", ".join(str(self.file_of(name).relative_to(self.root)) for name in alternatives)
            raise MissingUpstream(f"{self.root}: no {tried} (a file the family record names)")
        return found

    def find(self, *alternatives: str) -> types.ModuleType | None:
        """``module``, or None where no alternative's file exists."""
        name = next((n for n in alternatives if self.file_of(n).is_file()), None)
        if name is None:
            return None
        if name not in self.modules:
            with self.present(scopes=("load", "call")):
                _import(self.root, name)
        return self.modules[name]

    def first_present(self, paths) -> str | None:
        """The first of ``paths`` (relative to the root; a file's older places after it) this revision has."""
        return next((path for path in paths if (self.root / path).is_file()), None)

    def symbol(self, path: str, name: str, *, stand_ins: dict | None = None, package: str | None = None):
        """One definition of the file ``path`` (relative to the root) and only what it needs (``symbols.py``)."""
        with self.present(scopes=("load", "call")):
            found = symbols.load_symbol(self._file(path, name), name, stand_ins=stand_ins, package=package)
        return found

    def symbol_if_present(self, path: str, name: str, *, stand_ins: dict | None = None):
        """``symbol``, or None where the revision lacks the file or the definition (a path the record may lack)."""
        if not (self.root / path).is_file():
            return None
        try:
            return self.symbol(path, name, stand_ins=stand_ins)
        except LookupError:
            return None

    def method(self, path: str, class_name: str, method: str, *, stand_ins: dict | None = None):
        """``class_name.method`` of the file ``path`` as a plain function, its class never built (``symbols.py``)."""
        with self.present(scopes=("load", "call")):
            found = symbols.load_method(
                self._file(path, f"{class_name}.{method}"), class_name, method, stand_ins=stand_ins
            )
        return found

    def method_if_present(self, path: str, class_name: str, method: str, *, stand_ins: dict | None = None):
        """``method``, or None where the revision lacks the file or the method (the entry calling it reports that)."""
        try:
            return self.method(path, class_name, method, stand_ins=stand_ins)
        except LookupError:
            return None

    def read_method(self, path: str, class_name: str, method: str):
        """``class_name.method`` parsed, never executed (``symbols.read_method``); keyed as if loaded alone."""
        return symbols.read_method(self._file(path, f"{class_name}.{method}"), class_name, method)

    def inner(self, path: str, class_name: str, method: str, inner: str):
        """The function ``inner`` defined inside ``class_name.method``, as a factory of its closure (``symbols.py``)."""
        with self.present(scopes=("load", "call")):
            found = symbols.load_inner(self._file(path, f"{class_name}.{method}.{inner}"), class_name, method, inner)
        return found

    def read(self, path: str) -> str | None:
        """The text of an upstream file the family reads without executing it (recorded); None where absent."""
        file = self.root / path
        if not file.is_file():
            return None
        self.record(file)
        return file.read_text()

    def _file(self, path: str, selector: str) -> Path:
        file = self.root / path
        if not file.is_file():
            raise MissingUpstream(f"{self.root}: no {path} (a file the family record names)")
        self.record(file, selector)
        return file


def keyed_in_part(records) -> dict[str, tuple[str, ...]]:
    """Over several records ``(executed, alone)`` (loaders of one revision, or revisions of one history): the files
    only ever loaded in part, each with every definition any of them loaded; a file one of them executed whole is
    keyed whole."""
    parts: dict[str, set[str]] = {}
    whole: set[str] = set()
    for executed, alone in records:
        whole |= set(executed) - set(alone)
        for path, selectors in alone.items():
            parts.setdefault(path, set()).update(selectors)
    return {path: tuple(sorted(s)) for path, s in sorted(parts.items()) if path not in whole}


def _import(root: Path, name: str) -> None:
    """Import ``name`` from the tree; a package neither installed nor a placeholder is a ``MissingUpstreamImport``."""
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or str(exc)
        if (root / missing.split(".")[0]).is_dir():
            raise  # the revision itself lacks a module one of its files imports: its own error, not a dependency
        raise symbols.MissingUpstreamImport(
            missing,
            f"{name} (under {root}; the traceback shows the importing line)",
            "Install it; or, if the family's log-prob code only imports it, declare a Placeholder for it in the "
            "family record.",
        ) from exc
