"""The TransformerEngine family: ``parallel_cross_entropy``'s Triton kernels as a vocab-parallel token target."""
