raise ImportError("stand-in: the adapter must never execute TransformerEngine's package __init__ (it loads CUDA)")
