"""The TRL family: its token-level helpers, its Triton log-prob/entropy kernel and its chunked LM-head Function."""
