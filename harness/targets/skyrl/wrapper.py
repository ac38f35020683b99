"""SkyRL's Megatron wrapper's own steps, taken from its source and run as written.

``loss_func`` needs a Megatron model, so its syntax tree is read (through the loader, which records the file) and
three steps compiled from it: the temperature division (on a fresh tensor: the logits are the caller's), the entropy
gate (docs/bugs.md #1), the condition that builds ``entropy_loss_term``; a revision that takes a ``temperature`` and
divides nothing FAILS. Only expressions over ``_ALLOWED`` names, without calls, are admitted (safe to evaluate).
The loss settings are ``loss_config`` since 2026-01-30, ``self.cfg.trainer.algorithm`` before (the worker's config,
from #622, 2025-11-17, when the Megatron wrapper gained its entropy loss): both are the adapter's settings.
"""

from __future__ import annotations

import ast
from types import SimpleNamespace

import torch

# the current layout's file, then skyrl-train's (until 2026-02, root skyrl-train/)
WRAPPER = tuple(f"{where}skyrl_train/workers/megatron/megatron_model_wrapper.py" for where in ("skyrl/backends/", ""))
_ALLOWED = {"loss_config", "self", "temperature", "fused_lm_head", "logits"}


def _evaluate(code, **names) -> bool:
    return bool(eval(code, {"__builtins__": {}}, names))  # admitted expressions only (_admitted)


class WrapperSteps:
    """The three steps of one revision's ``loss_func``."""

    def __init__(self, grad_enabled: ast.expr, term_added: ast.expr, temperature: ast.If | None, takes: bool):
        self._grad = compile(ast.Expression(grad_enabled), WRAPPER[0], "eval")
        self._term = compile(ast.Expression(term_added), WRAPPER[0], "eval")
        self._divides = compile(ast.Expression(temperature.test), WRAPPER[0], "eval") if temperature else None
        self._division = compile(ast.Module(temperature.body, []), WRAPPER[0], "exec") if temperature else None
        self.takes_temperature = takes

    def grad_enabled(self, settings) -> bool:
        return _evaluate(self._grad, **_settings(settings))

    def term_added(self, settings) -> bool:
        return _evaluate(self._term, **_settings(settings))

    def scaled(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        """The logits the wrapper hands its log-prob code: its own division, on the output it owns (none: as given)."""
        if self._divides is None or not _evaluate(self._divides, temperature=temperature, fused_lm_head=False):
            return logits
        names = {"logits": logits.clone(), "temperature": temperature}
        exec(self._division, {"__builtins__": {}}, names)  # one admitted statement: logits.div_(temperature)
        return names["logits"]


def _settings(settings) -> dict:
    """The names the wrapper reads its loss settings by, in either form (the module docstring)."""
    return {
        "loss_config": settings,
        "self": SimpleNamespace(cfg=SimpleNamespace(trainer=SimpleNamespace(algorithm=settings))),
    }


def _admitted(node: ast.AST) -> bool:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return bool(names) and names <= _ALLOWED and not calls


def read(text: str) -> WrapperSteps | None:
    """The steps of the wrapper's ``loss_func`` (the first one holding the gate); None where one is missing."""
    functions = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)]
    for func in (n for n in functions if n.name == "loss_func"):
        grad = term = temperature = None
        for node in ast.walk(func):
            if isinstance(node, ast.With) and grad is None:
                call = node.items[0].context_expr
                named = isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "set_grad_enabled"
                used = {n.id for s in node.body for n in ast.walk(s) if isinstance(n, ast.Name)}
                entropy = any(name.startswith("entropy") for name in used)
                if named and entropy and len(call.args) == 1 and _admitted(call.args[0]):
                    grad = call.args[0]
            if isinstance(node, ast.If) and _admitted(node.test):
                targets = [t for s in node.body if isinstance(s, ast.Assign) for t in s.targets]
                if term is None and any(isinstance(t, ast.Name) and t.id == "entropy_loss_term" for t in targets):
                    term = node.test
                if temperature is None and [ast.unparse(s) for s in node.body] == ["logits.div_(temperature)"]:
                    temperature = node
        if grad is not None and term is not None:
            outer = next((method for method in functions if func in method.body), None)  # the method defining it
            takes = outer is not None and "temperature" in {a.arg for a in (*outer.args.args, *outer.args.kwonlyargs)}
            return WrapperSteps(grad, term, temperature, takes)
    return None
