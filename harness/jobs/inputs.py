"""What a job hands the target: fresh copies the check owns, and what became of them.

A check must be red for its own mechanism only. If a job handed the target
the very leaf it reads the gradient from, an in-place write into the logits
would be refused by torch ("a leaf Variable that requires grad is being used
in an in-place operation") and every value and gradient check would fail as
a crash: the write would hide whatever else is wrong (slime divided its
logits by the temperature in place for months; every one of its checks read
as that one crash). So a job keeps the leaf and hands the target a COPY of it
(``leaf.clone()``: an activation, like the LM head's output in a trainer):
an in-place write on it neither raises nor reaches the leaf, the gradient
flows back through the copy to the leaf, and the reference values come from
the Case, never from the tensor handed. Inputs without a gradient (token ids,
kept sets, advantages) are rebuilt from the Case for every call, which makes
them fresh copies already; they are only watched.

Whether the target wrote into what it was handed is recorded as data
(``report``): the inputs-unmutated checks read it, no other check does.
``reports_writes`` lets such a check see a write the target made before it
raised (a backward that found its saved tensor modified): the job then
returns the write instead of the error.
"""

from __future__ import annotations

import functools
import traceback
from contextvars import ContextVar

import torch

WRITES = "inputs_written"  # the result key: input name -> {"unchanged": bool, "version_delta": int}

_CURRENT: ContextVar[Handed | None] = ContextVar("lph_handed", default=None)


class Handed:
    """The inputs one job hands its target, with their state before the call."""

    def __init__(self):
        self._watched: dict[str, tuple[torch.Tensor, torch.Tensor, int]] = {}
        _CURRENT.set(self)

    def copy(self, name: str, leaf: torch.Tensor) -> torch.Tensor:
        """A fresh copy of ``leaf`` for the target (gradient flows back to ``leaf``), watched under ``name``."""
        return self.watch(name, leaf.clone())

    def watch(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """Record ``tensor``'s values and version counter under ``name``; returns it."""
        self._watched[name] = (tensor, tensor.detach().clone(), tensor._version)
        return tensor

    def report(self) -> dict:
        """``{WRITES: {name: {"unchanged", "version_delta"}}}`` for every input handed so far."""
        return {
            WRITES: {
                name: {
                    "unchanged": bool(torch.equal(tensor.detach(), before)),
                    "version_delta": tensor._version - version,
                }
                for name, (tensor, before, version) in self._watched.items()
            }
        }

    @staticmethod
    def current_report() -> dict:
        """The report of the inputs this job handed so far (``{}`` outside a job that hands any)."""
        handed = _CURRENT.get()
        return handed.report() if handed is not None else {}

    @property
    def written(self) -> bool:
        return any(not state["unchanged"] or state["version_delta"] for state in self.report()[WRITES].values())


def reports_writes(job):
    """With ``payload["inputs_only"]``, a job that raised AFTER writing into its inputs returns the write.

    An error without a write is raised as usual, so the pool still classifies
    it (a collective timeout stays a hang). Without the flag the job is unchanged.
    """

    @functools.wraps(job)
    def wrapper(payload: dict, ctx) -> dict:
        if not payload.get("inputs_only"):
            return job(payload, ctx)
        token = _CURRENT.set(None)
        try:
            return job(payload, ctx)
        except Exception:
            handed = _CURRENT.get()
            if handed is None or not handed.written:
                raise
            trace = list(ctx.tracer.records) if getattr(ctx, "tracer", None) is not None else []
            return {"error": traceback.format_exc(), "trace": trace, **handed.report()}
        finally:
            _CURRENT.reset(token)

    return wrapper
