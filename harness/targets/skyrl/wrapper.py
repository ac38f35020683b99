"""SkyRL's Megatron wrapper's own steps, taken from its source and run as written.

``workers/megatron/megatron_model_wrapper.py``'s ``loss_func`` composes the
log-prob Functions with three steps of its own, and needs a Megatron model to
run, so it cannot be called here. Its syntax tree is read instead (through
the loader, which records the file) and each step is compiled from it and
evaluated on the call's values, so what the checks see is the revision's
composition, not one the adapter wrote:

* the temperature: ``if temperature != 1.0 [and not fused_lm_head]:
  logits.div_(temperature)``, run on a fresh tensor (the model output the
  wrapper owns; the harness's logits are the caller's), only where its
  condition holds. Temperature is declared where the method that defines
  ``loss_func`` takes a ``temperature`` (declared means present): a revision
  that takes it and divides nothing FAILS the temperature checks;
* the entropy gate: the argument of the ``torch.set_grad_enabled(...)``
  around the entropy (docs/bugs.md #1);
* whether the entropy term enters the loss: the condition of the ``if`` that
  builds ``entropy_loss_term``.

Only expressions over ``loss_config``, ``temperature`` and ``fused_lm_head``
(attributes, ``not``, ``and``/``or``, comparisons with constants) are
admitted, so the evaluation is safe by construction. A wrapper without one of
the three is None (``read``): the policy loss is then not declared.
"""

from __future__ import annotations

import ast

import torch

WRAPPER = "skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py"
_ALLOWED = {"loss_config", "temperature", "fused_lm_head", "logits"}


class WrapperSteps:
    """The three steps of one revision's ``loss_func`` (see the module docstring)."""

    def __init__(self, grad_enabled: ast.expr, term_added: ast.expr, temperature: ast.If | None, takes: bool):
        self._grad = compile(ast.Expression(grad_enabled), WRAPPER, "eval")
        self._term = compile(ast.Expression(term_added), WRAPPER, "eval")
        self._divides = compile(ast.Expression(temperature.test), WRAPPER, "eval") if temperature else None
        self._division = compile(ast.Module(temperature.body, []), WRAPPER, "exec") if temperature else None
        self.takes_temperature = takes
        self.text = f"set_grad_enabled({ast.unparse(grad_enabled)}); term if {ast.unparse(term_added)}"

    @staticmethod
    def _evaluate(code, **names) -> bool:
        return bool(eval(code, {"__builtins__": {}}, names))  # admitted expressions only (see read())

    def grad_enabled(self, settings) -> bool:
        return self._evaluate(self._grad, loss_config=settings)

    def term_added(self, settings) -> bool:
        return self._evaluate(self._term, loss_config=settings)

    def scaled(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        """The logits the wrapper hands its log-prob code: its own division, on the output it owns (none: as given)."""
        if self._divides is None or not self._evaluate(self._divides, temperature=temperature, fused_lm_head=False):
            return logits
        names = {"logits": logits.clone(), "temperature": temperature}
        exec(self._division, {"__builtins__": {}}, names)  # one admitted statement: logits.div_(temperature)
        return names["logits"]


def _admitted(node: ast.AST) -> bool:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return bool(names) and names <= _ALLOWED and not calls


def _division(node: ast.If) -> bool:
    """``if <condition over temperature>: logits.div_(temperature)``."""
    if len(node.body) != 1 or not isinstance(node.body[0], ast.Expr) or not _admitted(node.test):
        return False
    call = node.body[0].value
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "div_"
        and ast.unparse(call) == "logits.div_(temperature)"
    )


def read(text: str) -> WrapperSteps | None:
    """The steps of the wrapper's ``loss_func`` (the first one holding the gate); None where one is missing."""
    tree = ast.parse(text)
    outer = {
        id(inner): "temperature" in {a.arg for a in (*method.args.args, *method.args.kwonlyargs)}
        for method in ast.walk(tree)
        if isinstance(method, ast.FunctionDef)
        for inner in method.body
        if isinstance(inner, ast.FunctionDef)
    }
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "loss_func"):
        grad = term = temperature = None
        for node in ast.walk(func):
            if isinstance(node, ast.With) and grad is None:
                call = node.items[0].context_expr
                named = isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "set_grad_enabled"
                entropy = any(
                    isinstance(n, ast.Name) and n.id.startswith("entropy") for s in node.body for n in ast.walk(s)
                )
                if named and entropy and len(call.args) == 1 and _admitted(call.args[0]):
                    grad = call.args[0]
            if isinstance(node, ast.If) and term is None and _admitted(node.test):
                assigned = {
                    t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)
                }
                if "entropy_loss_term" in assigned:
                    term = node.test
            if isinstance(node, ast.If) and temperature is None and _division(node):
                temperature = node
        if grad is not None and term is not None:
            return WrapperSteps(grad, term, temperature, outer.get(id(func), False))
    return None
