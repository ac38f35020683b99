"""Liger-Kernel's token-level cross entropy through the token entry point (log-probs as ``-CE`` per row).

Liger is loaded from ``LPH_LIGER_PATH`` (the gate's ``--no-deps`` install of
``liger==X``, or a checkout) or the installed ``liger-kernel``; nothing of it is
copied here. Its kernels are Triton: on a CPU run ``TRITON_INTERPRET=1`` is set
(unless already set, and not with ``LPH_DEVICE=cuda``) BEFORE Liger is
imported, so ``triton.jit`` builds them for the CPU interpreter.

Two Functions, two targets:

* ``LigerVocabParallelTarget``: ``LigerVocabParallelCEFunction``
  (``ops/vocab_parallel_cross_entropy.py``, what ``LigerMegatronCrossEntropy``
  runs), vocab-parallel through its own ``tp_group`` argument. It takes
  Megatron's ``[seq, batch, V_local]`` logits and ``[seq, batch]`` targets (the
  adapter passes ``batch = 1``), finds the shard's offset as ``rank * V_local``
  (the harness's layout) and returns the per-token loss; no label smoothing
  (``0.0``; formula and mode then do not matter).
* ``LigerTokenTarget``: ``LigerCrossEntropyFunction`` (``ops/cross_entropy.py``,
  ``LigerCrossEntropyLoss``), one rank over the whole vocabulary, called with
  ``reduction="none"``. At TP > 1 the adapter gathers the shards first
  (``harness.targets.upstream.whole_vocab``), as a trainer must. Its forward
  writes the logits' gradient into the input logits (its design: the LM-head
  output's buffer is reused for the gradient; a trainer never reads it again).
  The protocol's logits are the caller's, so Liger gets a tensor of its own as
  it would in a trainer: the gathered logits at TP > 1, a copy at one rank
  (which the memory checks charge to Liger).

Mapping: ``log_probs = -loss``; targets are global ids, never Liger's
``ignore_index`` (``-100``, its default). An entropy request is answered
with ``None``: the suite asks for entropy values only from targets that
declare it, and its bad-input rows ask regardless, which must reach Liger. Not declared, hence UNSUPPORTED:
``entropy`` (none returned), ``temperature`` (no such argument: Liger's
callers divide the logits themselves; ``softcap`` is a different transform),
``chunking`` (no chunk argument), ``packed`` and the rest.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from harness.targets.protocol import Target
from harness.targets.upstream import located
from harness.targets.upstream.whole_vocab import gather_vocabulary

PATH_VARIABLE = "LPH_LIGER_PATH"
MARKER = Path("liger_kernel/ops/cross_entropy.py")
IGNORE_INDEX = -100  # Liger's default; never a valid vocabulary id


def liger_root() -> Path:
    return located.package_root(
        "liger_kernel", PATH_VARIABLE, MARKER, "`pip install --no-deps liger-kernel==X` (`nox -s upstream -- liger==X`)"
    )


def import_liger(module: str, root: Path | None = None):
    """``liger_kernel.<module>`` from ``root`` (default ``liger_root()``), under Triton's CPU interpreter.

    Liger is imported as the package it is (its modules import each other as
    ``liger_kernel.*``), so one process holds one Liger: the first root wins.
    ``TRITON_INTERPRET=1`` is set unless ``LPH_DEVICE=cuda``.
    """
    if not os.environ.get("LPH_DEVICE", "cpu").startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    root = liger_root() if root is None else Path(root)
    located.put_first_on_path(root)
    return root, importlib.import_module(f"liger_kernel.{module}")


class LigerVocabParallelTarget(Target):
    """``LigerVocabParallelCEFunction`` at any TP size through its own ``tp_group`` (see the module docstring)."""

    capabilities = frozenset({"token"})

    def __init__(self, root: Path | None = None):
        root, module = import_liger("ops.vocab_parallel_cross_entropy", root)
        self.function = module.LigerVocabParallelCEFunction
        self.name = f"liger-kernel-{located.version(root, 'liger-kernel')}-vocab-parallel"

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        if temperature != 1.0 or chunk_size is not None:
            raise RuntimeError(f"{self.name}: no temperature and no chunk (capabilities not declared)")
        batched, batched_targets = logits.unsqueeze(1), targets.unsqueeze(1)  # Megatron's [seq, batch = 1, ...]
        loss = self.function.apply(batched, batched_targets, tp_group, IGNORE_INDEX, 0.0, "pytorch", "global")
        return -loss.squeeze(1), None


class LigerTokenTarget(Target):
    """``LigerCrossEntropyFunction`` (one rank; shards gathered at TP > 1; see the module docstring)."""

    capabilities = frozenset({"token"})

    def __init__(self, root: Path | None = None):
        root, module = import_liger("ops.cross_entropy", root)
        self.function = module.LigerCrossEntropyFunction
        self.name = f"liger-kernel-{located.version(root, 'liger-kernel')}-cross-entropy"

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        if temperature != 1.0 or chunk_size is not None:
            raise RuntimeError(f"{self.name}: no temperature and no chunk (capabilities not declared)")
        whole = gather_vocabulary(logits, tp_group)
        if whole is logits:  # one rank: Liger would write its gradient into the caller's logits
            whole = logits.clone()
        loss = self.function.apply(whole, targets, None, IGNORE_INDEX, 0.0, 0.0, "none")[0]
        return -loss, None
