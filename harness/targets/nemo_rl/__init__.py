"""The NeMo-RL family: its record (family.py) and its token-level policy loss (policy.py)."""
