raise ImportError("stand-in: the adapter must never execute TRL's package __init__")
