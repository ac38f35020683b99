"""The verl family: its record and translations (family.py), its engine forward and PPO loss (engine.py)."""
