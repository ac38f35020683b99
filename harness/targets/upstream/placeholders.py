"""Modules upstream code imports that the harness provides instead, declared as data (``Placeholder``).

A trainer's log-prob module imports packages the log-prob code never uses
(Ray, httpx, wandb, loguru, a trainer config that pulls the whole trainer).
A family record lists them; while the loader executes upstream files (and,
for ``scope="call"``, while the family is called) each one that is NOT
installed is given a placeholder, and removed from ``sys.modules`` afterwards,
so no other code ever sees it. An installed package is always used as it is.

The default placeholder (``absent``) is a module whose every attribute is a
class that refuses to be used: annotations such as ``httpx.AsyncClient | None``
still evaluate, a call raises ``ModuleNotFoundError`` naming what was used.
A record may give a ``build`` instead (SkyRL's ``ray.is_initialized()`` that
answers False, a ``loguru.logger`` forwarding to ``logging``).

The list is explicit: a module imported inside ``try``/``except ImportError``
is never on it, so upstream's own fallback runs; any other missing package
fails the load loudly (``MissingUpstreamImport``).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass


class _Refusing(type):
    """A placeholder class: its attributes are placeholders too, and using it raises."""

    def __getattr__(cls, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return refusing(f"{cls.__qualname__}.{attribute}")

    def __call__(cls, *args, **kwargs):
        raise ModuleNotFoundError(
            f"{cls.__qualname__} was used, but its package is not installed: the harness loads only the family's "
            "log-prob code, and this call lies outside it"
        )


def refusing(name: str) -> type:
    """A class named ``name`` that refuses to be instantiated or called (the one "refuses to be used" object)."""
    return _Refusing(name.rpartition(".")[2], (), {"__qualname__": name})


class AbsentModule(types.ModuleType):
    """A placeholder for a package that is not installed: every attribute is a ``refusing`` class."""

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return refusing(f"{self.__name__}.{attribute}")


def holding(**attributes):
    """A ``build`` for a placeholder that is a plain module holding ``attributes`` (names upstream reads of it)."""

    def build(name: str) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        return module

    return build


def absent(name: str) -> types.ModuleType:
    module = AbsentModule(name)
    module.__path__ = []  # a package, so ``import name.sub`` finds the placeholder finder
    return module


def absent_holding(**attributes):
    """A ``build`` for an absent package that holds ``attributes``: every other name refuses to be used (``absent``)."""

    def build(name: str) -> types.ModuleType:
        module = absent(name)
        module.__dict__.update(attributes)
        return module

    return build


# Ray without a cluster (SkyRL's registry, miles' utilities): not initialised, and ``@ray.remote`` (bare or with
# options) leaves the function or class as it is, to run locally; any other use of Ray refuses (``absent``).
RAY_WITHOUT_CLUSTER = absent_holding(
    is_initialized=lambda: False,
    remote=lambda cls=None, **options: cls if cls is not None else (lambda inner: inner),
)


@dataclass(frozen=True)
class Placeholder:
    """A module the harness provides when it is not installed: ``name``, how to build it, why, for how long.

    ``scope``: ``"load"`` while upstream files execute; ``"call"`` also while the family is called (an import
    inside an upstream function); ``"process"``: installed once, for good (Megatron's parallel state, which
    upstream backward passes look up after the call returned). ``replaces``: stood in even where the module
    exists (an upstream module the record chooses not to execute: a trainer config that imports the trainer).
    """

    name: str
    why: str
    build: Callable[[str], types.ModuleType] = absent
    scope: str = "load"
    replaces: bool = False


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent that is not a package (Megatron's stand-in), or a broken one
        return False


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: answers for a placeholder's submodules that nothing else found."""

    def __init__(self, tops):
        self.tops, self.created = set(tops), []

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in self.tops:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        self.created.append(spec.name)
        return absent(spec.name)

    def exec_module(self, module):
        return None


@contextlib.contextmanager
def provided(placeholders, scopes=("load", "call")):
    """While active, each placeholder of ``scopes`` whose module cannot be found is in ``sys.modules``."""
    added = []
    for placeholder in placeholders:
        missing = placeholder.replaces or not _findable(placeholder.name)
        if placeholder.scope in scopes and placeholder.name not in sys.modules and missing:
            sys.modules[placeholder.name] = placeholder.build(placeholder.name)
            added.append(placeholder.name)
    finder = _Finder(name for name in added if "." not in name)
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [*added, *finder.created]:
            sys.modules.pop(name, None)
