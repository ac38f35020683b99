"""Float64 references. They import torch only, never ``impl/``: an oracle that reuses production code proves nothing."""

from oracles import layout, losses, token

__all__ = ["layout", "losses", "token"]
