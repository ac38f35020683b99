"""PyTorch's own ops as targets: the chunked ``linear_cross_entropy`` (hidden-state path)."""
