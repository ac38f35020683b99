"""Stand-in for SkyRL's loss registry (upstream defines it in ppo_utils.py): the stand-in ppo_utils modules of
``skyrl_fixed`` and ``skyrl_self_reducing`` (two SkyRL revisions) register their losses here.

Like SkyRL's registry it imports Ray at module level, so loading it exercises the adapter's Ray stand-in.
"""

import ray


class PolicyLossRegistry:
    """Name -> loss function; without Ray the functions stay local, as in SkyRL."""

    _functions = {}

    @classmethod
    def register(cls, name, func):
        cls._functions[str(name)] = func

    @classmethod
    def get(cls, name):
        if ray.is_initialized():
            raise RuntimeError("the stand-in registry has no actor sync")
        return cls._functions[str(name)]

    @classmethod
    def list_available(cls):
        return list(cls._functions)
