raise ImportError("stand-in: the adapter must never execute ms-swift's package __init__")
