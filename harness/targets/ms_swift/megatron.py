"""Megatron-core as ms-swift's second root: ms-swift's log-probs are ``-tensor_parallel.vocab_parallel_cross_entropy``.

Megatron's own file runs, not the kernel's stand-in (``upstream/megatron_cross_entropy.py``): what is checked is
what ms-swift's trainer runs, and its files are in ``executed``.
"""

from __future__ import annotations

import ast
import sys
import types

from harness.targets.upstream.loader import Loader
from harness.targets.upstream.locate import Locate, find
from harness.targets.upstream.placeholders import holding

CROSS_ENTROPY = "megatron.core.tensor_parallel.cross_entropy"
IMPORTERS = ("megatron/core/tensor_parallel/cross_entropy.py", "megatron/core/tensor_parallel/utils.py")
CORE_UTILS = "megatron/core/utils.py"
LOCATE = Locate("megatron", "megatron/core/tensor_parallel/cross_entropy.py", "LPH_MEGATRON_PATH", pypi="megatron-core")
HINT = (
    "ms-swift's log-probs run Megatron-core's vocab_parallel_cross_entropy: set LPH_MEGATRON_PATH to a Megatron-LM "
    "checkout (or `pip install --no-deps --target DIR megatron-core==X` and give DIR)"
)


def _core_utils(loader: Loader) -> types.ModuleType:
    """``megatron.core.utils`` as far as the cross-entropy files import it, each name loaded alone (the file imports
    CUDA-only packages at its top)."""
    names = {}
    for path in IMPORTERS:
        for node in ast.walk(ast.parse(loader.read(path) or "")):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "megatron.core.utils":
                names.update(dict.fromkeys(alias.name for alias in node.names))
    return holding(**{name: loader.symbol(CORE_UTILS, name) for name in names})("megatron.core.utils")


def load(state: types.ModuleType) -> types.SimpleNamespace:
    """Megatron's cross entropy on the parallel-state stand-in ``state``: ``tensor_parallel`` as ms-swift imports
    it, the ``loader`` (what executed), the ``version``."""
    # The kernel's stand-in registers ``megatron`` in this process; the installed package is looked up without it.
    stand_ins = {name: sys.modules.pop(name) for name in [n for n in sys.modules if n.split(".")[0] == "megatron"]}
    try:
        located = find("megatron-core", LOCATE, install_hint=HINT)
    finally:
        sys.modules.update(stand_ins)
    loader = Loader(located.root, ("megatron",))
    loader.modules["megatron.core.parallel_state"] = state
    loader.modules["megatron.core.utils"] = _core_utils(loader)
    cross_entropy = loader.module(CROSS_ENTROPY).vocab_parallel_cross_entropy
    package = holding(vocab_parallel_cross_entropy=cross_entropy)("megatron.core.tensor_parallel")
    return types.SimpleNamespace(tensor_parallel=package, loader=loader, version=located.version)
