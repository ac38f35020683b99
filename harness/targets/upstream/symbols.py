"""Loading one function or class from an upstream module without executing the module's imports.

An adapter usually needs one function (a log-prob routine, a loss) from a
module whose top-level imports pull a whole trainer: Ray, vLLM, Megatron, a
model registry. ``load_symbol(path, name)`` parses the file, keeps the
symbol's definition plus the module-level statements it needs, transitively
(the functions, classes and assignments it refers to, and the import
statements that bind names it uses), and executes only those, as a fresh
module. Unused imports never run. The kept statements are compiled from the
file's own syntax tree, so tracebacks and ``inspect.getsource`` point at the
real file and lines.

A needed import that fails is a ``MissingUpstreamImport`` naming the module,
the line that imports it, and how to stand it in: ``stand_ins={"name":
object}`` binds a name instead of running the import (or the definition)
that would have bound it.

Limits (what ``load_symbol`` cannot see, so an adapter must stand it in):

* names bound only inside module-level ``if``/``try``/``with`` blocks or by
  ``from m import *`` (they are not collected; the symbol then fails with a
  NameError when it reaches them, as it would with the name missing);
* names reached dynamically (``globals()[...]``, ``getattr(module, ...)``,
  strings given to ``eval``);
* module-level side effects the symbol relies on (registries filled by
  decorators elsewhere, monkey-patches): only the kept statements run;
* relative imports need ``package=`` (the dotted package the file lives in),
  resolvable in this process.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
import textwrap
import types
from pathlib import Path

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class MissingUpstreamImport(ImportError):
    """An upstream module the code under test imports is not installed and not stood in (a load ERROR, not a FAIL)."""

    failure_kind = "load"  # harness.checks.failure.LOAD

    def __init__(self, missing: str, where: str, how: str):
        super().__init__(f"{where} imports {missing!r}, which is not installed here. {how}", name=missing)
        self.missing, self.where, self.how = missing, where, how


def _bound_names(node: ast.stmt) -> list[str]:
    """The module-level names ``node`` binds (definitions, simple assignments, imports)."""
    if isinstance(node, _DEFINITIONS):
        return [node.name]
    if isinstance(node, ast.Import):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [alias.asname or alias.name for alias in node.names if alias.name != "*"]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)]


def _annotations(node: ast.AST):
    """The annotation subtrees under ``node`` (arguments, returns, annotated assignments)."""
    for child in ast.walk(node):
        if isinstance(child, ast.arg) and child.annotation is not None:
            yield child.annotation
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.returns is not None:
            yield child.returns
        elif isinstance(child, ast.AnnAssign):
            yield child.annotation


def _used_names(node: ast.AST, skip_annotations: bool) -> set[str]:
    """Every name ``node`` reads (a superset of its free names: locals are filtered by the module's bindings).

    Under ``from __future__ import annotations`` annotations are never
    evaluated, so the names only they mention are not needed.
    """
    skipped = {id(n) for a in _annotations(node) for n in ast.walk(a)} if skip_annotations else set()
    return {
        child.id
        for child in ast.walk(node)
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load) and id(child) not in skipped
    }


def needed_statements(tree: ast.Module, name: str, stand_ins=()) -> list[ast.stmt]:
    """The module-level statements ``name`` needs, in file order (stand-in names are not followed)."""
    future = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    lazy_annotations = any(alias.name == "annotations" for n in future for alias in n.names)
    binders: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        for bound in _bound_names(node):
            binders.setdefault(bound, []).append(node)
    if name not in binders or not any(isinstance(n, _DEFINITIONS) for n in binders[name]):
        raise LookupError(f"no module-level function or class {name!r} (a name inside if/try is not collected)")
    kept: set[int] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current in stand_ins or current not in binders:
            continue
        for node in binders[current]:
            if id(node) in kept:
                continue
            kept.add(id(node))
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                pending.extend(_used_names(node, lazy_annotations) - {current})
    return future + [node for node in tree.body if id(node) in kept and node not in future]


def load_symbol(path, name: str, *, stand_ins: dict | None = None, package: str | None = None):
    """``name`` (a module-level function or class of the file ``path``), loaded without the module's other code.

    ``stand_ins`` binds names before anything runs: the statements that would
    have bound them are skipped. ``package``: the file's package, for relative
    imports. Returns the object; its module (``__module__``) is a fresh one.
    """
    path = Path(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    return _execute_needed(path, tree, name, dict(stand_ins or {}), package)


def load_method(path, class_name: str, method: str, *, stand_ins: dict | None = None, package: str | None = None):
    """The method ``class_name.method`` of the file ``path`` as a plain function, without its class or module.

    For a trainer method under test (TRL's ``GRPOTrainer._compute_loss``):
    its class derives from a framework's trainer, which is never built; the
    method runs with a stand-in ``self`` the adapter provides. The
    module-level names the method reads are collected as ``load_symbol``
    collects them (a name of the class itself included, which then loads
    the class).
    """
    path = Path(path)
    tree, alias = _method_tree(ast.parse(path.read_text(), filename=str(path)), path, class_name, method)
    loaded = _execute_needed(path, tree, alias, dict(stand_ins or {}), package)
    loaded.__name__ = loaded.__qualname__ = method
    return loaded


def _methods(tree: ast.Module, class_name: str, method: str) -> list[ast.FunctionDef]:
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    return [n for c in classes for n in c.body if isinstance(n, ast.FunctionDef) and n.name == method]


def _method_tree(tree: ast.Module, path, class_name: str, method: str) -> tuple[ast.Module, str]:
    """``tree`` with the method appended as a module-level function, and that function's name."""
    methods = _methods(tree, class_name, method)
    if not methods:
        raise LookupError(f"{path}: no method {class_name}.{method} (module-level class)")
    alias = f"_lph_{class_name}__{method}"
    function = ast.FunctionDef(**{field: getattr(methods[-1], field) for field in methods[-1]._fields})
    function.name = alias
    ast.copy_location(function, methods[-1])
    return ast.Module(body=[*tree.body, function], type_ignores=[]), alias


def read_method(path, class_name: str, method: str) -> ast.FunctionDef:
    """``class_name.method`` of the file ``path`` parsed, never executed: how upstream calls the code under test
    (verl's ``forward_step`` building its processor's arguments), for an adapter to call it alike."""
    path = Path(path)
    methods = _methods(ast.parse(path.read_text(), filename=str(path)), class_name, method)
    if not methods:
        raise LookupError(f"{path}: no method {class_name}.{method} (module-level class)")
    return methods[-1]


def source_tree(function) -> ast.Module:
    """The syntax tree of a function's own source (a loaded definition keeps its file's lines, as said above): what
    an adapter reads of a composition it runs (the batch keys it reads, the form of a call's answer)."""
    return ast.parse(textwrap.dedent(inspect.getsource(function)))


def _stored(node: ast.AST) -> set[str]:
    """Names ``node`` binds in its own scope: its arguments and every name it assigns."""
    arguments = node.args
    named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    stores = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return {a.arg for a in named if a is not None} | stores


def load_inner(path, class_name: str, method: str, inner: str, *, stand_ins: dict | None = None):
    """The function ``inner`` defined inside ``class_name.method`` (a closure over the method's locals) as a factory.

    For a composition an older revision wrote as a closure (verl's logits processor inside its engine's
    ``forward_step``): ``factory(**values)`` returns ``inner`` with its free variables (``factory.free``: the
    method's locals it reads) bound to ``values`` by name; nothing else of the method runs.
    """
    path = Path(path)
    tree, alias, free = _inner_tree(ast.parse(path.read_text(), filename=str(path)), path, class_name, method, inner)
    loaded = _execute_needed(path, tree, alias, dict(stand_ins or {}), None)
    loaded.free = free
    return loaded


def _inner_tree(tree: ast.Module, path, class_name: str, method: str, inner: str):
    """``tree`` with a module-level factory of the closure appended, the factory's name, the free variables."""
    methods = _methods(tree, class_name, method)
    found = [(m, n) for m in methods for n in ast.walk(m) if isinstance(n, ast.FunctionDef) and n.name == inner]
    if not found:
        raise LookupError(f"{path}: no function {inner} inside {class_name}.{method}")
    outer, function = found[-1]
    free = sorted((_used_names(function, False) & _stored(outer)) - _stored(function))
    alias = f"_lph_{class_name}__{method}__{inner}"
    arguments = ast.arguments(
        posonlyargs=[], args=[], vararg=None, kwonlyargs=[ast.arg(arg=name) for name in free],
        kw_defaults=[None] * len(free), kwarg=None, defaults=[],
    )  # fmt: skip
    body = [function, ast.Return(value=ast.Name(id=inner, ctx=ast.Load()))]
    factory = ast.FunctionDef(name=alias, args=arguments, body=body, decorator_list=[], returns=None)
    ast.copy_location(factory, function)
    tree = ast.fix_missing_locations(ast.Module(body=[*tree.body, factory], type_ignores=[]))
    return tree, alias, tuple(free)


def executed_digest(source: str, selectors) -> str:
    """The identity of what loading ``selectors`` alone executes of a file whose text is ``source``: a digest of
    those statements' syntax trees without positions (a change elsewhere in the file, a moved line or a comment
    leaves it equal).

    A selector names what the loader loaded: ``name`` (``load_symbol``), ``Class.method`` (``load_method``) or
    ``Class.method.inner`` (``load_inner``). The statements are those ``needed_statements`` keeps WITHOUT the
    stand-ins (a superset of what ran, so equal parts mean equal code ran). A history keys a file that was only
    ever loaded this way by this part, not by the whole file: a commit elsewhere in a trainer's 2,000-line module
    cannot change a verdict, and costs no replay. A selector the text lacks is ``absent``; text that does not
    parse is itself the part.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return hashlib.sha1(source.encode()).hexdigest()
    parts = []
    for selector in sorted(selectors):
        names = selector.split(".")
        try:
            if len(names) == 1:
                selected, name = tree, names[0]
            elif len(names) == 2:
                selected, name = _method_tree(tree, "", *names)
            else:
                selected, name, _free = _inner_tree(tree, "", *names)
            kept = needed_statements(selected, name)
        except LookupError:
            parts.append(f"{selector}: absent")
            continue
        parts.append(f"{selector}: " + "\n".join(ast.dump(node) for node in kept))
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()


def _execute_needed(path: Path, tree: ast.Module, name: str, stand_ins: dict, package: str | None):
    """Execute the statements ``name`` needs as a fresh module (``stand_ins`` bound first); return ``name``."""
    module = types.ModuleType(f"lph_symbol_{path.stem}_{name}")
    module.__file__, module.__package__ = str(path), package
    module.__dict__.update(stand_ins)
    # While it executes the module is in sys.modules, as an imported one is: a dataclass with string annotations
    # looks its module up there (TRL's GRPOConfig).
    sys.modules[module.__name__] = module
    try:
        for node in needed_statements(tree, name, stand_ins):
            if set(_bound_names(node)) <= set(stand_ins) and _bound_names(node):
                continue
            code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
            try:
                exec(code, module.__dict__)
            except ModuleNotFoundError as exc:
                missing = exc.name or str(exc)
                bound = ", ".join(f"{b!r}" for b in _bound_names(node))
                raise MissingUpstreamImport(
                    missing,
                    f"{path}:{node.lineno} (needed by {name!r})",
                    f"Install it, or stand it in: load_symbol(..., stand_ins={{{bound}: <object>}}).",
                ) from exc
    finally:
        sys.modules.pop(module.__name__, None)
    return module.__dict__[name]
