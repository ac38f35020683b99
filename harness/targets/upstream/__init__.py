"""The upstream kernel: families as data on one machinery (docs/targets.md, "Families as data").

``locate`` (the one root finder), ``loader`` (executes a revision's files and records what ran),
``placeholders`` (modules provided instead, declared as data), ``calls`` (call records), ``family`` (the
record and the target it becomes); beside them the stand-ins and conventions families share: Megatron's
parallel state and cross entropy, the packed-sequence layout of SkyRL and NeMo-RL, the shared-gradient seam.
"""
