"""The SkyRL family: its record (``family.py``), the wrapper's steps, the policy loss, the placeholders."""
