"""Stand-in (tests only): miles' parallel-state registry (``set_parallel_state`` / ``get_parallel_state``)."""

_parallel_state = None


def set_parallel_state(state) -> None:
    global _parallel_state
    _parallel_state = state


def get_parallel_state():
    assert _parallel_state is not None, "ParallelState not initialized"
    return _parallel_state
