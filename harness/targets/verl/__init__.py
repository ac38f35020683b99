"""The verl family: its Megatron log-prob path and PPO loss (token.py, policy.py), its fused LM-head
path (hidden.py), and the loading of the files under test (source.py)."""
