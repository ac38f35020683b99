"""Megatron-core as ms-swift's second root: its own vocab-parallel cross entropy, which ms-swift's log-probs call.

``vocab_parallel_utils.py`` computes ms-swift's log-probs as
``-tensor_parallel.vocab_parallel_cross_entropy(...)``: Megatron's code, not
ms-swift's. The harness runs Megatron's file rather than its stand-in
(``upstream/megatron_cross_entropy.py``, written from the signature), so what
is checked is what ms-swift's trainer runs. Megatron is found by the kernel's
root finder (``LPH_MEGATRON_PATH``: a Megatron-LM checkout or an unpacked
``megatron-core`` wheel; else the installed ``megatron.core``) and executed by
a second ``Loader`` over its root, which records the files (``executed``).

``tensor_parallel/cross_entropy.py`` and ``tensor_parallel/utils.py`` are
executed as modules; ``megatron.core.parallel_state`` is the kernel's stand-in
(the job's groups); ``megatron/core/utils.py`` imports CUDA-only packages at
its top, so the names the two files import from it are loaded alone
(``Loader.symbol``); the package ``__init__`` re-exports the function, which
``tensor_parallel`` below does the same way.
"""

from __future__ import annotations

import ast
import sys
import types

from harness.targets.upstream.loader import Loader
from harness.targets.upstream.locate import Locate, find

CROSS_ENTROPY = "megatron.core.tensor_parallel.cross_entropy"
IMPORTERS = ("megatron/core/tensor_parallel/cross_entropy.py", "megatron/core/tensor_parallel/utils.py")
CORE_UTILS = "megatron/core/utils.py"
LOCATE = Locate("megatron", "megatron/core/tensor_parallel/cross_entropy.py", "LPH_MEGATRON_PATH", pypi="megatron-core")
HINT = (
    "ms-swift's log-probs run Megatron-core's vocab_parallel_cross_entropy: set LPH_MEGATRON_PATH to a Megatron-LM "
    "checkout (or `pip install --no-deps --target DIR megatron-core==X` and give DIR)"
)


def _imported_from_utils(loader: Loader) -> list[str]:
    """The names the cross-entropy files import from ``megatron.core.utils`` (their own import statements)."""
    names = []
    for path in IMPORTERS:
        for node in ast.walk(ast.parse(loader.read(path) or "")):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "megatron.core.utils":
                names += [alias.name for alias in node.names]
    return list(dict.fromkeys(names))


def load(state: types.ModuleType) -> types.SimpleNamespace:
    """Megatron's cross entropy at its root, on the parallel-state stand-in ``state``: ``tensor_parallel`` (the
    package as ms-swift imports it), the ``loader`` (what executed), the ``revision``."""
    # The kernel's stand-in registers ``megatron`` in this process; the installed package is looked up without it.
    stand_ins = {name: sys.modules.pop(name) for name in [n for n in sys.modules if n.split(".")[0] == "megatron"]}
    try:
        located = find("megatron-core", LOCATE, install_hint=HINT)
    finally:
        sys.modules.update(stand_ins)
    loader = Loader(located.root, ("megatron",))
    loader.modules["megatron.core.parallel_state"] = state
    utils = types.ModuleType("megatron.core.utils")
    for name in _imported_from_utils(loader):
        setattr(utils, name, loader.symbol(CORE_UTILS, name))
    loader.modules["megatron.core.utils"] = utils
    cross_entropy = loader.module(CROSS_ENTROPY)
    package = types.ModuleType("megatron.core.tensor_parallel")
    package.vocab_parallel_cross_entropy = cross_entropy.vocab_parallel_cross_entropy
    return types.SimpleNamespace(tensor_parallel=package, loader=loader, version=located.version)
