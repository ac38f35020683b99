"""One family target from a library's token-level target and its hidden-state target.

The gate runs one target per SPEC, so a family whose library has both paths
presents both: each entry point delegates. The per-call option capabilities
(``entropy``, ``entropy_gate``, ``chunking``, ``temperature``) are one name
for both entry points, so one is declared only where BOTH paths honour it:
TRL's token helpers have an entropy gate (``entropy_requires_grad``) and its
chunked LM-head Function has none, and declaring the union would send the
hidden-state gate check to a path that cannot run it. What one path alone has
is still checked by that path's own ``module:attr`` target.
"""

from __future__ import annotations

from harness.targets.protocol import Target

OPTIONS = frozenset({"entropy", "entropy_gate", "chunking", "temperature"})


def combined_capabilities(token: frozenset, hidden: frozenset) -> frozenset:
    """Both paths' capabilities, an option only where both have it (see the module docstring)."""
    return frozenset((token | hidden) - OPTIONS) | (token & hidden & OPTIONS)


def combined_limits(*targets) -> dict | None:
    """Every path's declared ``case_limits`` (``harness.cases.limits``), the smaller bound where two name one."""
    limits: dict = {}
    for target in targets:
        for key, bound in (getattr(target, "case_limits", None) or {}).items():
            limits[key] = min(bound, limits.get(key, bound))
    return limits or None


class TokenAndHidden(Target):
    """Delegates ``token_log_probs`` to ``self.token`` and ``hidden_log_probs`` to ``self.hidden``.

    ``hidden`` is None for a library version without the hidden-state path (an older release in a history
    replay): the family is then its token path alone, with that path's capabilities.
    """

    def __init__(self, token: Target, hidden: Target | None, name: str):
        self.token, self.hidden, self.name = token, hidden, name
        self.case_limits = combined_limits(token, hidden)
        if hidden is None:
            self.capabilities = frozenset(token.capabilities)
            return
        self.capabilities = combined_capabilities(frozenset(token.capabilities), frozenset(hidden.capabilities))

    def token_log_probs(self, logits, targets, **options):
        return self.token.token_log_probs(logits, targets, **options)

    def hidden_log_probs(self, hidden, weight, targets, **options):
        return self.hidden.hidden_log_probs(hidden, weight, targets, **options)


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
