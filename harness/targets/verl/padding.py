"""The trainer's left-right padded batch, and the two libraries verl's padding helpers take it apart with.

Since #3600 (2025-10-13) verl's trainer turns its left-right padded batch
(prompts left-padded, responses right-padded) into the engine's no-padding
form with ``left_right_2_no_padding`` before every ``ppo_loss``, and ppo_loss
pads the engine's output back with ``no_padding_2_padding``. Until #5115
(2026-02-04) that second step read what the first one stored (``indices``,
``max_seq_len``, ``max_response_len``), so the adapter gives verl the batch the
trainer holds and lets verl's own first step run; it never builds those
entries itself.

Both steps use flash-attn's padding helpers (CUDA builds only) and store
values in tensordict's ``NonTensorData``; neither package is installed here.
The stand-ins below follow their documented behaviour: ``unpad_input`` keeps
the positions an attention mask marks, in row-major order, with each row's
offsets; ``pad_input`` puts them back into zeros. verl bound flash-attn's at
import only where CUDA is available until #4480 (2025-12-11), so on a CPU
``bind_flash_attn`` binds them where a CUDA process would have.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn.functional as F  # noqa: N812  (torch's own name for it)

from harness.targets.upstream.placeholders import Placeholder, absent_holding, provided


def index_first_axis(values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """flash-attn's ``index_first_axis``: the rows ``indices`` names of ``values`` (first axis)."""
    return values.index_select(0, indices)


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor, *unused):
    """flash-attn's ``unpad_input``: the marked positions of ``[B, S, ...]`` as ``[nnz, ...]``, their flat indices,
    the rows' int32 offsets (``cu_seqlens``), the longest row and each row's length."""
    lengths = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    offsets = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    longest = int(lengths.max()) if lengths.numel() else 0
    return index_first_axis(hidden_states.flatten(0, 1), indices), indices, offsets, longest, lengths


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """flash-attn's ``pad_input``: ``[nnz, ...]`` back into zeros of ``[batch, seqlen, ...]`` at ``indices``."""
    out = hidden_states.new_zeros(batch * seqlen, *hidden_states.shape[1:])
    out = out.index_put((indices,), hidden_states)  # out of place: the gradient flows to hidden_states
    return out.view(batch, seqlen, *hidden_states.shape[1:])


@dataclasses.dataclass
class NonTensorData:
    """tensordict's wrapper for a value stored beside tensors; verl reads ``.data`` back (tensordict_utils)."""

    data: object


_FLASH = {"pad_input": pad_input, "unpad_input": unpad_input, "index_first_axis": index_first_axis}
_WHY = "flash-attn's padding helpers (CUDA builds only), for verl's left_right_2_no_padding / no_padding_2_padding"
# verl.utils.attention_utils imports them inside its functions (#4480 on): while the family is called, and only
# where the revision has no CPU fallback of its own (7bc80c00a, 2026-08, on: verl's own fallback runs)
FLASH_ATTN = (
    Placeholder("flash_attn", _WHY, scope="call"),
    Placeholder("flash_attn.bert_padding", _WHY, absent_holding(**_FLASH), scope="call"),
)


def calling(up, tp_group=None, cp_group=None):
    """The family's calling state: flash-attn's helpers where the revision has no fallback (``padding_fallback``)."""
    return provided(FLASH_ATTN, scopes=("call",)) if up.padding_fallback is None else contextlib.nullcontext()


def bind_flash_attn(module) -> None:
    """An older padding.py binds flash-attn's helpers at import only where CUDA is available: bind them on a CPU."""
    if module is not None:
        for name in ("pad_input", "unpad_input"):
            vars(module).setdefault(name, _FLASH[name])


def left_right(lengths: list[tuple[int, int]], device) -> dict:
    """The trainer's batch for ``lengths`` (each sample's total and response): ``prompts`` left-padded to the
    longest prompt, ``responses`` right-padded to the longest response, their concatenation ``input_ids`` with its
    ``attention_mask``, the ``response_mask`` and the position ids (0 on the left padding, as verl counts them).
    The ids are zeros: ppo_loss reads where the tokens are, never which (the engine's output carries them)."""
    prompt_width = max((total - response for total, response in lengths), default=0)
    width = max((response for _, response in lengths), default=0)
    prompt_mask = torch.zeros(len(lengths), prompt_width, dtype=torch.long, device=device)
    response_mask = torch.zeros(len(lengths), width, dtype=torch.long, device=device)
    for i, (total, response) in enumerate(lengths):
        prompt_mask[i, prompt_width - (total - response) :], response_mask[i, :response] = 1, 1
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    return {
        "prompts": torch.zeros_like(prompt_mask),
        "responses": torch.zeros_like(response_mask),
        "input_ids": torch.zeros_like(attention_mask),
        "attention_mask": attention_mask,
        "response_mask": response_mask.to(torch.bool),
        "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
    }
