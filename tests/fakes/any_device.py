"""A family record with its CUDA-only conditions (``on_cuda``) held on any device: for stand-ins whose code runs on
a CPU where the upstream code they stand in for moves a tensor to CUDA itself."""

from dataclasses import replace

from harness.targets.upstream.family import Family, Option


def any_device(family: Family) -> Family:
    options = tuple(
        Option(o.capability, tuple(getattr(when, "expression", when) for when in o.when), o.extends)
        for o in family.options
    )
    return replace(family, options=options)
