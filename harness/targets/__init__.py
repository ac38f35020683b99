"""Targets: adapters presenting an implementation to the suite (see protocol.py).

``load_target(spec)`` accepts the one target grammar (``spec.py``): ``impl``
(the default, torch backend), ``impl-triton`` (impl on its Triton kernels), a
family's checkout ``FAMILY=PATH`` or release ``FAMILY==X`` (the registry's
families, ``registry.py``), ``package.module:attr`` or ``path/to/file.py:attr``;
``attr`` is a Target subclass, a zero-argument factory, or an instance.
Loaded once per process and cached, so rank processes pay the import once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from functools import cache
from pathlib import Path

from harness.names import resolve
from harness.targets import registry
from harness.targets.protocol import CAPABILITIES, KeptSet, PackedInputs, Target, Unsupported
from harness.targets.spec import install, parse

__all__ = ["CAPABILITIES", "KeptSet", "PackedInputs", "Target", "Unsupported", "load_target"]


def _load_attr(spec: str):
    location, sep, attr = spec.rpartition(":")
    if not sep or not location or not attr:
        raise ValueError(
            f"--target {spec!r}: expected 'impl', 'impl-triton', 'FAMILY=PATH', 'FAMILY==X', 'package.module:attr' or "
            "'path/to/file.py:attr'"
        )
    if location.endswith(".py"):
        path = Path(location).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"--target {spec!r}: no file {path}")
        module_name = f"lph_target_{abs(hash(str(path)))}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
        try:
            return getattr(module, attr)
        except AttributeError:
            raise AttributeError(f"--target {spec!r}: {location} has no attribute {attr!r}") from None
    try:
        return resolve(spec)
    except AttributeError as exc:
        raise AttributeError(f"--target {exc}") from None


@cache
def load_target(spec: str = "impl") -> Target:
    """Build the adapter named by ``spec`` (see the module docstring)."""
    if spec == "impl":
        from harness.targets.impl_target import ImplTarget

        return ImplTarget()
    if spec == "impl-triton":
        from harness.targets.impl_triton import ImplTritonTarget

        return ImplTritonTarget()
    parsed = parse(spec)
    if parsed.kind in ("checkout", "release"):
        target = registry.target(parsed.family, install(parsed))
    else:
        obj = _load_attr(spec)
        target = obj() if callable(obj) and not isinstance(obj, Target) else obj
    for field in ("name", "capabilities"):
        if not hasattr(target, field):
            raise TypeError(f"--target {spec!r}: the adapter must define {field!r} (see docs/targets.md)")
    unknown = set(target.capabilities) - CAPABILITIES
    if unknown:
        raise ValueError(
            f"--target {spec!r} declares unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}"
        )
    return target
