"""ms-swift's packed path: ``forward_step`` with ``padding_free`` on, the protocol's thd stream as its micro-batch.

What ms-swift's Megatron trainer does with a padding-free micro-batch, and so
what runs: the model's output (this rank's rows) divided in place by the
temperature, ``compute_logps_and_entropy_from_logits`` on the rank's labels,
under zigzag CP ``reconstruct_tensor_cp`` (every sequence gathered whole on
every CP rank, the rank's own rows in the graph), then
``pad_logps_back_to_batch`` (``[B, max_len]``, each sequence right-aligned).

The translation: Megatron's labels are already shifted (position ``p`` holds
token ``p + 1``) and ``-100`` where the next token is no completion token, as
ms-swift builds them; under zigzag CP each sequence padded to ``2·cp·c_i`` and
the rank's labels its chunks ``r`` and ``2·cp − 1 − r`` (``packing.py``: the
layout NeMo-RL and SkyRL share, which is Megatron's); ``packed_seq_params``
carries the padded ``cu_seqlens``. From the ``[B, max_len]`` output the record
reads this rank's zigzag view of each response.
"""

from __future__ import annotations

import torch

from harness.targets.ms_swift.policy import Settings
from harness.targets.upstream import calls, packing

IGNORED = -100  # ms-swift's label for a position whose next token is no completion token


class Model:
    """The model ``forward_step`` calls: its output is a fresh copy of the logits ``[1, rows, V_local]`` (still in
    the caller's graph), whatever the batch (a model's output is its own tensor; the trainer divides it in place)."""

    def __init__(self, logits):
        self.logits = logits

    def __call__(self, **data):
        return self.logits.unsqueeze(0).clone()


def labels(inputs, cp: int, cp_rank: int, device) -> torch.Tensor:
    """This rank's labels ``[1, rows]``: per sequence, the next token at response positions, -100 elsewhere."""
    pieces = []
    for i, (tokens, total, response, length) in enumerate(
        zip(inputs.tokens, inputs.total_lengths, inputs.response_lengths, packing.padded_lengths(inputs, cp))
    ):
        if tokens.numel() != total:  # the labels are built from them: a short row would broadcast into wrong labels
            raise ValueError(
                f"tokens[{i}] holds {tokens.numel()} ids but total_lengths[{i}] = {total}: give each sample's full "
                "token ids (ms-swift's labels are built from them)"
            )
        row = torch.full((length,), IGNORED, dtype=torch.long, device=device)
        first = max(total - response - 1, 0)
        row[first : total - 1] = tokens.to(device=device, dtype=torch.long)[first + 1 : total]
        if cp > 1:
            chunk = length // (2 * cp)
            row = torch.cat(
                [row[cp_rank * chunk : (cp_rank + 1) * chunk], row[(2 * cp - 1 - cp_rank) * chunk :][:chunk]]
            )
        pieces.append(row)
    return torch.cat(pieces).unsqueeze(0) if pieces else torch.zeros(1, 0, dtype=torch.long, device=device)


def _view(batch: torch.Tensor, inputs, cp: int, cp_rank: int) -> list[torch.Tensor]:
    """Each sample's zigzag view of its response from ``[B, max_len]`` (sequence ``i`` right-aligned)."""
    lengths = packing.padded_lengths(inputs, cp)
    width = batch.shape[1]
    return [
        batch[i, torch.tensor([width - lengths[i] + p for p in positions], dtype=torch.long, device=batch.device)]
        for i, positions in enumerate(packing.view_positions(inputs, cp, cp_rank))
    ]


def packed(up, call: calls.PackedCall):
    """``forward_step(trainer, iter([data]), model)`` on the padding-free micro-batch; this rank's views."""
    cp, cp_rank = call.cp
    device = call.logits.device
    lengths = packing.padded_lengths(call.inputs, cp)
    cu_seqlens = packing.cu_seqlens_padded(call.inputs, cp, device)
    rows = packing.local_sequence_rows(call.inputs, cp)
    seq_lens = torch.tensor(lengths, dtype=torch.long, device=device)
    mask = torch.ones(len(lengths), max(lengths, default=0), dtype=torch.bool, device=device)
    batch = Settings(completion_mask=mask, seq_lengths=seq_lens)
    trainer = Settings(
        args=Settings(context_parallel_size=cp, padding_free=True, cp_partition_mode="zigzag"),
        _prepare_batch=lambda data: data,  # the batch is already this rank's (CP split, on its device)
        enable_routing_replay=False,
        micro_batch_size=len(lengths),
        temperature=call.temperature,
        compute_entropy=call.with_entropy,
        loss_func=lambda *args, **kwargs: None,
    )
    data = {
        "grpo_batch": batch,
        "labels": labels(call.inputs, cp, cp_rank, device),
        "packed_seq_params": Settings(cu_seqlens_q=cu_seqlens, cu_seqlens_kv=cu_seqlens, seq_lens=seq_lens),
    }
    log_probs, loss = up.forward_step(trainer, iter([data]), Model(call.logits[:rows]))
    entropy = loss.keywords["data"]["per_token_entropy"]
    views = _view(log_probs, call.inputs, cp, cp_rank)
    return views, (_view(entropy, call.inputs, cp, cp_rank) if call.with_entropy else None)
