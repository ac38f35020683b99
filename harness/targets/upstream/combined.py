"""A family still on its old adapter joined to its hidden-state adapter (``WithHidden``), and the case limits of a
target with several paths (``combined_limits``).

Families on the kernel carry every path in their record (``Entry.lacks`` keeps each path's own options); verl and
NeMo-RL, still on their old adapters, get their hidden-state path here.
"""

from __future__ import annotations

from harness.targets.protocol import Target


def combined_limits(*targets) -> dict | None:
    """Every path's declared ``case_limits`` (``harness.cases.limits``), the smaller bound where two name one."""
    limits: dict = {}
    for target in targets:
        for key, bound in (getattr(target, "case_limits", None) or {}).items():
            limits[key] = min(bound, limits.get(key, bound))
    return limits or None


class WithHidden:
    """A family still on its old adapter plus its hidden-state adapter: one target, each path its own options.

    Every entry point but ``hidden_log_probs`` goes to ``family``; the family's capabilities are unchanged for
    them, and ``hidden``/``hidden_tp`` are added; a hidden-state check is judged by the hidden adapter's own
    capabilities (``capabilities_for``), so an option one path lacks never narrows the other. A revision
    without the hidden-state path is the family alone, the reason kept in ``not_declared``.
    """

    def __init__(self, family: Target, build_hidden):
        self.family, self.name = family, family.name
        self.not_declared = dict(getattr(family, "not_declared", {}))
        try:
            self.hidden = build_hidden()
        except (FileNotFoundError, ModuleNotFoundError, AttributeError, LookupError) as exc:
            self.hidden = None
            self.not_declared["hidden_log_probs"] = f"{type(exc).__name__}: {exc}"
        levels = frozenset(self.hidden.capabilities) & {"hidden", "hidden_tp"} if self.hidden else frozenset()
        self.capabilities = frozenset(family.capabilities) | levels
        self.case_limits = combined_limits(family, self.hidden) if self.hidden else getattr(family, "case_limits", None)

    def capabilities_for(self, needed) -> frozenset:
        if "hidden" in needed and self.hidden is not None:
            return frozenset(self.hidden.capabilities)
        family = self.family
        return frozenset(
            family.capabilities_for(needed) if hasattr(family, "capabilities_for") else family.capabilities
        )

    def hidden_log_probs(self, hidden, weight, targets, **options):
        return self.hidden.hidden_log_probs(hidden, weight, targets, **options)

    def __getattr__(self, name):
        """Every other entry point, and the family's own attributes (``combination_needs``, ``files_under_test``)."""
        if name in ("family", "hidden"):
            raise AttributeError(name)
        return getattr(self.family, name)
