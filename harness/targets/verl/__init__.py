"""The verl family: its record (family.py), engine forward (packed.py), PPO loss (policy.py), stand-ins."""
