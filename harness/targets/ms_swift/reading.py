"""What ms-swift's trainer methods read, from their syntax (``harness/targets/ms_swift/family.py``'s ``_layout``).

The record decides a revision's batch layout, and refuses a composition it
cannot run, from what ``forward_step`` and ``loss_func`` read: the batch keys
with no default, the names and ``self`` attributes, whether the advantages are
widened per sequence. Each answer is about one method's syntax tree, never a
keyword searched in the file.
"""

from __future__ import annotations

import ast


def per_sequence_advantages(tree: ast.Module) -> bool:
    """Whether a method (its syntax tree) widens its advantages (``advantages.unsqueeze(...)``): one per sequence."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "unsqueeze" and isinstance(node.value, ast.Name):
            if node.value.id == "advantages":
                return True
    return False


def names_read(tree: ast.Module) -> set[str]:
    """Every name (``Name`` node: global or local) and ``self`` attribute a method (its syntax tree) reads."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
    return names


def batch_reads(tree: ast.Module) -> set[str]:
    """The keys a method (its syntax tree) reads of its batch ``data`` with no default (``data[key]``,
    ``data.pop(key)``)."""
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_data(node.value):
            keys.add(getattr(node.slice, "value", None))
        elif isinstance(node, ast.Call) and is_data(getattr(node.func, "value", None)):
            if node.func.attr == "pop" and len(node.args) == 1 and not node.keywords:
                keys.add(getattr(node.args[0], "value", None))
    return {key for key in keys if isinstance(key, str)}


def is_data(node) -> bool:
    """Whether ``node`` is the batch argument ``data``."""
    return isinstance(node, ast.Name) and node.id == "data"
