"""Every statement of the manual about the code names something that exists.

The README and ``docs/`` name files, modules, symbols and nox sessions in
backticks; a rename that leaves one behind makes the manual lie to the reader
who follows it. This scan reads every code span, keeps the ones that name
something of this repository (a path under one of its top-level entries, a
dotted module of its packages, ``module:attr`` or ``module.attr``, a constant
such as ``FAMILIES`` or ``LPH_DEVICE``, ``nox -s NAME``) and checks each
against the tree, without importing anything. Names of upstream code
(``slime/...``, ``verl.utils...``) start with no entry of this repository and
are not its business; ``reports/`` is output.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from harness import ROOT
from harness.names import OLD_CHECKS

# What a reference may start with to be about this repository.
PACKAGES = ("harness", "impl", "oracles", "bench", "properties", "regressions", "tests")
TOP_LEVEL = (*PACKAGES, "docs", "ci", "expectations", ".ci", ".github")
FILES = ("noxfile.py", "pyproject.toml", "README.md", "conftest.py")
INSTALLED = "logprob_harness."  # the installed names of impl/ and oracles/ (README, "Installing impl")

CODE_SPAN = re.compile(r"`([^`\n]+)`")
CONSTANT = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+|[A-Z]{4,}")  # ``FAMILIES``, ``LPH_DEVICE``: a name the repo defines
SESSION = re.compile(r"\bnox -s ([a-z_]+)")
PATH = re.compile(r"^[\w.\-/*<>]+$")
SUFFIXES = (".md", ".py", ".toml", ".yml", ".json", ".png", ".svg", ".txt", ".xml")


def manual_pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


@cache
def _sessions(root: Path) -> frozenset:
    tree = ast.parse((root / "noxfile.py").read_text())
    return frozenset(node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.decorator_list)


def _module_file(root: Path, dotted: str) -> Path | None:
    """The file or package directory of a dotted module of this repository, if it exists."""
    if dotted.startswith(INSTALLED):
        dotted = dotted[len(INSTALLED) :]
    base = root / dotted.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py", base):
        if candidate.exists():
            return candidate
    return None


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@cache
def _defined_names(path: Path) -> frozenset:
    """Names a module defines at its top level (and as class attributes), read from its syntax tree."""
    names = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


@cache
def _repository_words(root: Path) -> frozenset:
    """Every name the repository's code defines or reads (an environment variable is a string constant there),
    and every word of its CI files: what a bare constant in the manual may name."""
    words = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            if "fakes" in path.parts:  # stand-ins for upstream code, not the repository's names
                continue
            words |= _defined_names(path)
            for node in ast.walk(_tree(path)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    words.update(re.findall(r"\w+", node.value))
    words |= _defined_names(root / "noxfile.py")
    for path in [*(root / "ci").glob("*"), *(root / ".ci").glob("*")]:
        if path.is_file():
            words.update(re.findall(r"\w+", path.read_text()))
    return frozenset(words)


def _symbol_exists(root: Path, dotted: str) -> bool:
    """``a.b.c`` (a module) or ``a.b:attr`` / ``a.b.attr`` / ``a.b.Class.method`` (a module and what it defines)."""
    module, _, attr = dotted.partition(":")
    if attr:
        if module == OLD_CHECKS:  # a replay line from before the checks became a package (harness/names.py)
            return any(attr in _defined_names(path) for path in (root / "harness" / "checks").glob("*.py"))
        path = _module_file(root, module)
        return path is not None and path.is_file() and attr.split(".")[0] in _defined_names(path)
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _module_file(root, ".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        return not rest or (path.is_file() and rest[0] in _defined_names(path))
    return False


def _path_exists(root: Path, text: str) -> bool:
    text = text.split("::")[0].rstrip("/")
    if any(mark in text for mark in "*<"):  # a pattern or a placeholder: its fixed prefix must exist
        prefix = re.split(r"[*<]", text)[0].rstrip("/")
        return (root / prefix).exists() or (root / prefix).parent.exists()
    path = text.split(":")[0]  # path.py:attr
    return (root / path).exists()


def stale_references(text: str, root: Path = ROOT) -> list[str]:
    """The references in ``text`` to this repository that name nothing that exists."""
    stale = [f"nox -s {name}" for name in SESSION.findall(text) if name not in _sessions(root)]
    for span in CODE_SPAN.findall(text):
        for word in span.split():
            word = word.strip("(),;'\"")
            if word.split("/")[0] in TOP_LEVEL and "/" in word and PATH.match(word.split(":")[0]):
                if not _path_exists(root, word):
                    stale.append(word)
            elif CONSTANT.fullmatch(word):
                if word not in _repository_words(root):
                    stale.append(word)
            elif word in FILES or word.endswith(SUFFIXES):  # a bare file name: of an output, or said with its page
                continue
            elif re.fullmatch(r"[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?", word) and "." in word.split(":")[0]:
                head = word.removeprefix(INSTALLED).split(".")[0]
                if head in PACKAGES and not _symbol_exists(root, word):
                    stale.append(word)
    return stale


@pytest.mark.parametrize("page", manual_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_in_the_manual_exists(page):
    assert stale_references(page.read_text()) == []


def test_a_planted_stale_name_is_found():
    constant = "NO_SUCH_" + "CONSTANT"  # not a literal here: this module is part of the words the repository holds
    text = (
        "Run `nox -s nosuchsession`; see `harness/gate/nosuch.py`, `harness.gate.runner:no_such_function`, "
        f"`harness.checks.parity.no_such_check`, `impl.nosuchmodule` and `{constant}`. Upstream "
        "`slime/utils/ppo_utils.py` and `verl.utils.torch_functional` are not ours; `harness/gate/runner.py`, "
        "`harness.gate.runner:main`, `logprob_harness.impl.token_level`, `FAMILIES`, `LPH_DEVICE`, `nox -s tests` and "
        "`expectations/<family>.toml` exist."
    )
    assert stale_references(text) == [
        "nox -s nosuchsession",
        "harness/gate/nosuch.py",
        "harness.gate.runner:no_such_function",
        "harness.checks.parity.no_such_check",
        "impl.nosuchmodule",
        constant,
    ]
