"""How the code is laid out for installing and importing: no import cycles, relative imports, what the wheel holds.

* No import cycle (``impl/``, ``oracles/`` and ``harness/``): every ``.py`` is parsed with ``ast`` and every import,
  function-level ones included (only ``if TYPE_CHECKING:`` blocks are left
  out, they never run), becomes an edge of the module graph. Run this file
  as a script to print every cycle of the whole tree.
* ``impl`` imports neither ``oracles`` nor ``harness`` (an oracle or a check
  that shares code with the implementation proves nothing), ``oracles``
  neither ``impl`` nor ``harness``; and inside both every import of the own
  package is relative, so the same files import as ``impl`` from a checkout
  and as ``logprob_harness.impl`` installed.
* The wheel (slow: it builds one) holds ``logprob_harness/impl/**``,
  ``logprob_harness/oracles/**`` and its dist-info, nothing else, every
  ``.py`` of both trees among them; installed into a bare directory it
  imports and computes without the checkout on ``sys.path``.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The trees whose import graph is built, and those asserted cycle-free.
TREES = ("impl", "oracles", "harness")
ASSERTED = ("impl", "oracles", "harness")
INSTALLED = {"impl": "logprob_harness.impl", "oracles": "logprob_harness.oracles"}
# What each installed tree must never import (top-level names).
FORBIDDEN = {"impl": {"oracles", "harness"}, "oracles": {"impl", "harness"}}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import that can run, in source order: functions included, ``if TYPE_CHECKING:`` bodies left out."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name ``from <node.module>`` refers to, relative levels resolved against ``module``."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def parse_tree(trees=TREES) -> tuple[dict[str, set[str]], dict[str, list[tuple[str, int]]], list[str]]:
    """(graph: module -> the modules of these trees it imports, raw: module -> [(absolute name, level)], unreadable).

    An import of ``a.b.c`` is an edge to ``a.b.c`` and to the packages ``a``
    and ``a.b`` it runs first, except the importer's own parent packages
    (already imported when it runs). ``from p import x`` is an edge to
    ``p.x`` when that is a module, else to ``p``.
    """
    files = {}
    for top in trees:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                files[_module_name(path)] = path
    graph, raw, unreadable = {}, {}, []
    for module, path in files.items():
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, OSError):
            unreadable.append(module)
            continue
        is_package = path.name == "__init__.py"
        targets, raw[module] = set(), []
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
                raw[module].extend((name, 0) for name in names)
            else:
                base = _absolute(module, is_package, node)
                raw[module].append((base, node.level))
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            for name in names:
                parts = name.split(".")
                targets.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        own_parents = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        graph[module] = {t for t in targets if t in files and t != module and t not in own_parents}
    return graph, raw, unreadable


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module (Tarjan)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(set(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A concrete cycle through the component's first module (breadth-first: a shortest one)."""
    start = min(component)
    previous = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for succ in sorted(graph[node] & component):
            if succ == start:
                path = [node]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return path[::-1] + [start]
            if succ not in previous:
                previous[succ] = node
                queue.append(succ)
    return sorted(component)


def _describe(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_cycle_checker_finds_a_cycle_and_its_path():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]


def test_relative_imports_are_resolved_against_the_package():
    tree = ast.parse("from . import x\ndef f():\n    from ..row_stats import y\nfrom .env import z\n")
    nodes = _imports(tree)
    assert _absolute("impl.triton.kernels", False, nodes[0]) == "impl.triton"
    assert _absolute("impl.triton.kernels", False, nodes[1]) == "impl.row_stats"
    assert _absolute("impl.triton", True, nodes[2]) == "impl.triton.env"


def test_no_import_cycle_in_impl_and_oracles():
    graph, _, unreadable = parse_tree()
    assert not [m for m in unreadable if m.split(".")[0] in ASSERTED], unreadable
    assert "impl.triton.kernels" in graph, "the walk found no impl/ (run from a checkout)"
    asserted = [cycle for cycle in import_cycles(graph) if cycle[0].split(".")[0] in ASSERTED]
    assert not asserted, "import cycles:\n" + _describe(asserted)


def test_installed_trees_import_only_themselves_relatively():
    _, raw, _ = parse_tree(tuple(FORBIDDEN))
    problems = []
    for module, imports in raw.items():
        top = module.split(".")[0]
        for name, level in imports:
            first = name.split(".")[0]
            if first in FORBIDDEN[top]:
                problems.append(f"{module} imports {name}: {top}/ must never import {first}/")
            elif first == top and not level:
                problems.append(
                    f"{module} imports {name} absolutely: use a relative import (installed as {INSTALLED[top]})"
                )
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_wheel_installs_only_the_implementation_and_oracles_and_imports_without_the_checkout(tmp_path):
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("building the wheel (--no-build-isolation) needs setuptools: pip install setuptools")
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is None and importlib.util.find_spec("wheel") is None:
        pytest.skip("building the wheel with setuptools < 70.1 needs the wheel package: pip install wheel")
    # Built from a copy (the top-level files, impl/, oracles/): setuptools leaves build/ and *.egg-info/ in the
    # source tree, and a stale build/lib would ship files deleted since into the next wheel.
    source = tmp_path / "source"
    source.mkdir()
    for path in ROOT.iterdir():
        if path.is_file():
            shutil.copy2(path, source / path.name)
    for top in INSTALLED:
        shutil.copytree(ROOT / top, source / top, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", ".", "-w", str(tmp_path)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = tmp_path.glob("logprob_harness-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    allowed = ("logprob_harness/impl/", "logprob_harness/oracles/")
    strays = [n for n in names if not n.startswith(allowed) and not n.split("/")[0].endswith(".dist-info")]
    assert not strays, f"the wheel holds more than logprob_harness.impl/oracles: {strays}"
    expected = {
        f"logprob_harness/{path.relative_to(ROOT).as_posix()}"
        for top in INSTALLED
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert not expected - set(names), (
        f"files of impl/ or oracles/ left out of the wheel (a subpackage not listed in pyproject.toml's "
        f"[tool.setuptools] packages?): {sorted(expected - set(names))}"
    )

    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    code = f"""
import sys
sys.path.insert(0, {str(target)!r})
root = {str(ROOT)!r}
assert not [p for p in sys.path if p in ("", ".", root)], sys.path
import torch
from logprob_harness.impl.token_level import log_probs_and_entropy
import logprob_harness.impl.triton.env as env
import logprob_harness.oracles
assert env.interpreting() in (True, False) and env.triton_available() in (True, False)
assert "triton" not in sys.modules, "importing impl.triton.env must not import triton"
strays = sorted(name for name in sys.modules if name.split(".")[0] in ("impl", "oracles", "harness"))
assert not strays, f"the installed code imported checkout-only top-level modules: {{strays}}"
for module in (sys.modules["logprob_harness.impl.token_level"], logprob_harness.oracles):
    assert module.__file__.startswith({str(target)!r}), module.__file__
logits = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
targets = torch.tensor([0, 4, 2])
log_probs, entropy = log_probs_and_entropy(logits, targets)
expected = torch.log_softmax(logits.double(), dim=-1)
assert torch.allclose(log_probs.double(), expected.gather(1, targets[:, None])[:, 0], atol=1e-5), log_probs
assert torch.allclose(entropy.double(), -(expected.exp() * expected).sum(-1), atol=1e-5), entropy
print("ok")
"""
    # -I: no PYTHONPATH, no user site, not the script's nor the working directory on sys.path.
    run = subprocess.run(
        [sys.executable, "-I", "-c", code], cwd=target.parent, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout[-3000:] + run.stderr[-3000:]


if __name__ == "__main__":
    graph, _, unreadable = parse_tree()
    cycles = import_cycles(graph)
    print(f"{len(graph)} modules under {', '.join(TREES)}; {len(cycles)} import cycle(s)")
    print(_describe(cycles))
    if unreadable:
        print("not parsed:", ", ".join(unreadable))
    sys.exit(1 if cycles else 0)
