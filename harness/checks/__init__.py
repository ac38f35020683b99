"""Stage 3, the verdict: one check function per contract (parity, invariances, ownership, context
parallelism, the hidden-state path), the expected values they compare against (float64 oracle and the naive
same-dtype run), the tolerance policy, and the figures a check records for its verdict."""
