"""The Case: one complete, JSON-serialisable problem, rebuilt identically anywhere.

Hypothesis draws the STRUCTURE (sizes, layout, flags, scale); the seed fills
the bulk values through ``torch.Generator``. A Case therefore crosses a
process boundary as a few integers, reads well when shrunk
(``{tp: 2, samples: [[3, 1]], vocab: 4, logit_scale: 1e4}``), and a failing
one is replayed exactly from its JSON (``python -m harness.replay``).

Everything a check needs is derived here, on the parent and in every rank:
the GLOBAL logits for the oracle, each rank's local shard, token ids, loss
masks, probe weights and policy-loss inputs. Each quantity draws from its own
generator stream (seed, stream id), so adding a new quantity never changes
the values of an existing one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

import torch

from oracles import layout

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SPECIALS = ("ties", "neg_inf_columns", "huge_offset", "masked_shard")
MASK_MODES = ("ones", "zeros", "mixed")
CP_MODES = ("none", "zigzag", "allgather")

# Independent generator streams, one per derived quantity.
(_STREAM_LOGITS, _STREAM_TOKENS, _STREAM_MASKS, _STREAM_PROBE, _STREAM_POLICY, _STREAM_ROW_TARGETS, _STREAM_FILLER) = (
    range(7)
)


@dataclass(frozen=True)
class Case:
    """One problem: structure drawn by Hypothesis, values filled from ``seed``.

    ``samples`` holds ``(total_length, response_length)`` pairs (``T_i``,
    ``R_i``); the prompt length is ``T_i - R_i >= 1``.
    """

    seed: int = 0
    vocab: int = 8
    tp: int = 1
    cp: int = 1
    cp_mode: str = "none"
    qkv_format: str = "thd"
    samples: tuple = ((4, 2),)
    mask_mode: str = "ones"
    pad_multiple: int = 1
    chunk_size: int | None = None
    dtype: str = "float32"
    temperature: float = 1.0
    logit_scale: float = 1.0
    special: tuple = ()
    with_entropy: bool = True
    entropy_coef: float = 0.0
    response_only: bool = False
    loss_mask_only: bool = False
    noncontig_grads: bool = False
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "samples", tuple(tuple(int(x) for x in s) for s in self.samples))
        object.__setattr__(self, "special", tuple(self.special))
        if self.vocab % self.tp:
            raise ValueError(f"vocab={self.vocab} must be divisible by tp={self.tp} (the trainer pads the vocabulary)")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.mask_mode not in MASK_MODES:
            raise ValueError(f"mask_mode must be one of {MASK_MODES}, got {self.mask_mode!r}")
        unknown = set(self.special) - set(SPECIALS)
        if unknown:
            raise ValueError(f"unknown special values {sorted(unknown)}; choose from {SPECIALS}")
        for total, response in self.samples:
            if not 0 <= response <= total - 1:
                raise ValueError(f"sample {(total, response)}: need 0 <= response <= total - 1")
        if self.cp_mode not in CP_MODES:
            raise ValueError(f"cp_mode must be one of {CP_MODES}, got {self.cp_mode!r}")
        if (self.cp > 1) != (self.cp_mode != "none"):
            raise ValueError(f"cp={self.cp} needs cp_mode {'zigzag/allgather' if self.cp > 1 else 'none'}")
        if self.cp > 1 and self.qkv_format != "thd":
            raise ValueError("context parallelism splits the packed thd stream: use qkv_format='thd'")

    # ---- serialisation -------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Case:
        return cls(**json.loads(text))

    def with_(self, **changes) -> Case:
        return replace(self, **changes)

    # ---- structure -------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.tp * self.cp

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def total_lengths(self) -> list[int]:
        return [total for total, _ in self.samples]

    @property
    def response_lengths(self) -> list[int]:
        return [response for _, response in self.samples]

    @property
    def rows(self) -> int:
        return layout.stream_rows(self.total_lengths, self.qkv_format, self.pad_multiple)

    @property
    def vocab_local(self) -> int:
        return self.vocab // self.tp

    def response_rows(self) -> list[list[int]]:
        return layout.response_rows(self.total_lengths, self.response_lengths, self.qkv_format, self.pad_multiple)

    def generator(self, stream: int) -> torch.Generator:
        """The independent stream ``stream`` of this Case's values (the one seed formula)."""
        return torch.Generator().manual_seed(self.seed * 7919 + stream)

    # ---- values ------------------------------------------------------------
    def neg_inf_columns(self) -> list[int]:
        """Masked vocabulary entries (at least one column always stays finite)."""
        if "neg_inf_columns" not in self.special or self.vocab < 2:
            return []
        g = self.generator(_STREAM_LOGITS + 100)
        count = max(1, self.vocab // 4)
        return sorted(torch.randperm(self.vocab, generator=g)[:count].tolist())

    def masked_shard(self) -> tuple[int, list[int]] | None:
        """With the ``masked_shard`` special: ``(kept TP shard, rows confined to it)``; None otherwise.

        A mask (a sampling kept set, a banned-token mask) can confine a row's
        support to one TP shard: every other shard sees the row all ``-inf``,
        so its local row max is ``-inf`` (the rescale to the global max must
        give 0, not ``0 * -inf = NaN``). Half the rows, drawn from the seed,
        are confined to the shard of a column left finite; the other rows
        keep their full support, so a call mixes both. At tp=1 there is no
        other shard and nothing is masked.
        """
        if "masked_shard" not in self.special or self.tp < 2:
            return None
        g = self.generator(_STREAM_LOGITS + 200)
        finite = [v for v in range(self.vocab) if v not in set(self.neg_inf_columns())]
        kept = finite[int(torch.randint(0, len(finite), (1,), generator=g))] // self.vocab_local
        rows = torch.randperm(self.rows, generator=g)[: max(1, self.rows // 2)]
        return kept, sorted(rows.tolist())

    def allowed_token_ids(self) -> torch.Tensor:
        """Token/target ids: never a masked entry (with ``masked_shard``, only the kept shard's columns)."""
        masked = set(self.neg_inf_columns())
        shard = self.masked_shard()
        if shard is not None:
            width = self.vocab_local
            masked |= set(range(self.vocab)) - set(range(shard[0] * width, (shard[0] + 1) * width))
        return torch.tensor([v for v in range(self.vocab) if v not in masked], dtype=torch.long)

    def global_logits(self) -> torch.Tensor:
        """The full ``[rows, V]`` logits in the case's dtype (what every rank shards)."""
        g = self.generator(_STREAM_LOGITS)
        logits = torch.randn(self.rows, self.vocab, generator=g) * self.logit_scale
        if "ties" in self.special and self.vocab >= 2:
            logits[:, 1::2] = logits[:, 0:1]
            logits[::3] = logits[::3, :1]
        if "huge_offset" in self.special:
            offset = torch.randint(0, 2, (self.rows, 1), generator=g).float() * 3e4
            logits = logits + offset
        limit = torch.finfo(self.torch_dtype).max / 4
        logits = logits.clamp(-limit, limit)
        columns = self.neg_inf_columns()
        if columns:
            logits[:, columns] = float("-inf")
        shard = self.masked_shard()
        if shard is not None:
            kept, rows = shard
            width = self.vocab_local
            outside = [v for v in range(self.vocab) if not kept * width <= v < (kept + 1) * width]
            logits[torch.tensor(rows).unsqueeze(1), torch.tensor(outside)] = float("-inf")
        return logits.to(self.torch_dtype)

    def local_rows(self, cp_rank: int) -> list:
        """Per local row of CP rank ``cp_rank``: its global row, or None for a padding row."""
        if self.cp_mode == "none":
            return list(range(self.rows))
        starts = layout.sample_starts(self.total_lengths, "thd", self.pad_multiple)
        entries = layout.local_rows(self.cp_mode, self.total_lengths, self.cp, cp_rank, self.pad_multiple)
        return [None if entry is None else starts[entry[0]] + entry[1] for entry in entries]

    def _filler(self, rows: int) -> torch.Tensor:
        """Logits of padding rows (nothing is predicted from them; their gradient must be 0)."""
        g = self.generator(_STREAM_FILLER)
        filler = torch.randn(rows, self.vocab, generator=g) * self.logit_scale
        columns = self.neg_inf_columns()
        if columns:
            filler[:, columns] = float("-inf")
        return filler.to(self.torch_dtype)

    def rank_logits(self, tp_rank: int, cp_rank: int = 0) -> torch.Tensor:
        """This rank's logits: its CP rows (docs/math.md layouts) of its TP rank's vocabulary shard."""
        logits = self.global_logits()
        if self.cp_mode != "none":
            rows = self.local_rows(cp_rank)
            local = self._filler(len(rows))
            held = [k for k, row in enumerate(rows) if row is not None]
            local[held] = logits[[rows[k] for k in held]]
            logits = local
        width = self.vocab_local
        return logits[:, tp_rank * width : (tp_rank + 1) * width].contiguous()

    def views(self, cp_rank: int) -> list[list[int]]:
        """Per sample, the response indices CP rank ``cp_rank`` returns (all of them without CP)."""
        if self.cp_mode == "none":
            return [list(range(r)) for r in self.response_lengths]
        return layout.zigzag_view(self.total_lengths, self.response_lengths, self.cp, cp_rank)

    def tokens(self) -> list[torch.Tensor]:
        """Each sample's full token ids (never a masked vocabulary entry)."""
        g = self.generator(_STREAM_TOKENS)
        allowed = self.allowed_token_ids()
        return [allowed[torch.randint(0, allowed.numel(), (total,), generator=g)] for total in self.total_lengths]

    def row_targets(self) -> torch.Tensor:
        """Token-level targets, one global id per logits row."""
        g = self.generator(_STREAM_ROW_TARGETS)
        allowed = self.allowed_token_ids()
        return allowed[torch.randint(0, allowed.numel(), (self.rows,), generator=g)]

    def loss_masks(self) -> list[torch.Tensor]:
        g = self.generator(_STREAM_MASKS)
        masks = []
        for response in self.response_lengths:
            if self.mask_mode == "ones":
                masks.append(torch.ones(response))
            elif self.mask_mode == "zeros":
                masks.append(torch.zeros(response))
            else:
                masks.append(torch.randint(0, 2, (response,), generator=g).float())
        return masks

    def probe_weights(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Non-uniform probe-loss weights ``a`` (log-probs) and ``b`` (entropy), 0 where masked."""
        g = self.generator(_STREAM_PROBE)
        a, b = [], []
        for mask in self.loss_masks():
            a.append(torch.randn(mask.numel(), generator=g, dtype=torch.float64) * mask)
            b.append(torch.randn(mask.numel(), generator=g, dtype=torch.float64) * mask)
        return a, b

    def row_probe_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Token-level probe weights, one pair per logits row."""
        g = self.generator(_STREAM_PROBE + 100)
        return (
            torch.randn(self.rows, generator=g, dtype=torch.float64),
            torch.randn(self.rows, generator=g, dtype=torch.float64),
        )

    def advantages(self) -> list[torch.Tensor]:
        g = self.generator(_STREAM_POLICY)
        return [torch.randn(response, generator=g, dtype=torch.float64) for response in self.response_lengths]

    def old_log_prob_offsets(self) -> list[torch.Tensor]:
        """``old_log_probs = reference log-probs + offset``: ratios near 1, some clipped, none overflowing."""
        g = self.generator(_STREAM_POLICY + 100)
        return [
            (torch.rand(response, generator=g, dtype=torch.float64) - 0.5) * 0.8 for response in self.response_lengths
        ]
