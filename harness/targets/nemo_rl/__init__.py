"""The NeMo-RL family: the distributed log-prob Functions (token/packed) and the chunked hidden-state
Function."""
