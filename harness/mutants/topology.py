"""The same bits on every topology (docs/topology.md): a TP shard summing in its own order, and the hidden path's
last row block left unpadded.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant

TOPOLOGY = (
    Mutant(
        name="tp_shard_sums_own_order",
        bug="docs/topology.md: each TP shard sums its row in its own order (one tree per shard, not a subtree of "
        "the tree over the global vocabulary), so a row's log-prob, entropy and gradient change in the last bits "
        "with the TP degree: a rollout at TP 1 and training at TP 4 no longer agree exactly",
        module="impl.row_stats",
        original="    return leaves // tp if leaves % tp == 0 else 1\n",
        replacement="    return 1  # 'each rank sums its own shard'\n",
        killed_by=("properties/test_topology.py",),
    ),
    Mutant(
        name="hidden_last_block_unpadded",
        bug="docs/topology.md: the hidden-state path's last row block runs at its own row count ('padding with "
        "zeros cannot change a sum'), so a BLAS picks another kernel for it and a row's bits depend on how many "
        "rows share its block: the same row after other rows gets other last bits",
        module="impl.fixed_gemm",
        original="        if end - start == MATMUL_BLOCK_ROWS and _aligned(self.hidden[start:end]):\n",
        replacement="        if _aligned(self.hidden[start:end]):  # 'the last block needs no padding'\n",
        killed_by=("properties/test_topology.py",),
    ),
)
