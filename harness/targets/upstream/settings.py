"""The settings object upstream functions read their options from, strict about what the adapter provides.

slime reads ``args.<name>``, SkyRL ``cfg.algorithm.<name>``: an adapter fills
the settings it maps, and a revision that reads a setting the adapter does not
know fails with an error naming the setting and the adapter function to extend,
never with a default the adapter did not choose (``getattr(x, name, default)``
still returns the upstream default, as upstream intends).
"""

from __future__ import annotations

from argparse import Namespace


class StrictSettings(Namespace):
    """A Namespace whose missing attribute raises an AttributeError naming it and where to map it."""

    # Set by each family: how upstream names the object, and the adapter function that fills it.
    READ_AS = "settings"
    MAPPED_IN = "the adapter"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"upstream read {self.READ_AS}.{name}, which the harness adapter does not set: this version needs a new "
            f"setting mapped in {self.MAPPED_IN}"
        )


class OneProcessAccelerator:
    """A trainer's ``accelerator`` on one process (Hugging Face Accelerate's names): gathering returns the tensor."""

    num_processes = 1
    sync_gradients = True

    def gather(self, tensor):
        return tensor

    gather_for_metrics = gather

    def reduce(self, tensor, reduction="sum"):
        return tensor
