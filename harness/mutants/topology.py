"""The same bits on every topology (docs/topology.md): a TP shard summing in its own order, the hidden path's
vocabulary leaves summed in sequence, and its last row block left unpadded.

The first two change an order of IEEE additions and are detectable on every machine; the third changes only the
GEMM kernel a BLAS picks, so it carries a probe (harness/mutants/probes.py) and is EQUIVALENT HERE on a machine
whose BLAS gives a block's rows the same bits at every row count.
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
        bug_class="topology: same bits",
        representative=True,
    ),
    Mutant(
        name="hidden_leaves_summed_in_sequence",
        bug="docs/topology.md: grad_hidden's parts over the vocabulary leaves are added one after the other "
        "('the order of a sum cannot matter'), not by the adjacent-pair tree whose subtrees are the TP shards, so "
        "at TP 1 four leaves add as ((p0 + p1) + p2) + p3 and at TP 2 as (p0 + p1) + (p2 + p3): grad_hidden's "
        "bits follow the TP degree",
        module="impl.fixed_gemm",
        original="    level = 0\n    while stack and stack[-1][0] == level:\n        part = stack.pop()[1].add_(part)\n"
        "        level += 1\n    stack.append((level, part))\n",
        replacement="    if stack:  # 'leaves may be added in any order'\n        part = stack.pop()[1].add_(part)\n"
        "    stack.append((0, part))\n",
        killed_by=("properties/test_topology.py",),
        bug_class="topology: same bits",
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
        probe="harness.mutants.probes:last_block_rows",
        bug_class="topology: same bits",
    ),
)
