"""The sampling-replay inputs of a Case: its kept set ``K``, the sampled tokens, the form handed to the target.

A sampling Case is an ordinary Case whose ``extra["sampling"]`` says how ``K``
is made (docs/sampling.md), so it crosses the process boundary as JSON and is
replayed exactly. ``kept`` kinds, each a boundary the contract names:

* ``random``: each column kept with probability 1/2 (the sampled token always);
* ``target_only``: ``|K| = 1``, the sampled token alone (log-prob and entropy 0);
* ``whole_vocab``: every column (the full-vocabulary values);
* ``one_shard``: ``K`` inside one TP rank's vocabulary slice (the first with a finite
  column; every other rank holds none of ``K``);
* ``derived``: ``K`` from ``top_k`` / ``top_p`` / ``min_p`` by the oracle's ``derive_kept``
  (vLLM's order, ties kept); with ``special=("ties",)`` the k-th value is tied;
* ``outside``: a random ``K`` and a sampled token NOT in it.

The sampled token is drawn from ``K`` (from outside ``K`` for ``outside``).
``form`` is what the target receives: ``csr`` (global ids, each row's ids
shuffled and its first id repeated: ``K`` is a set), ``dense`` (each rank's
``[rows, V_local]`` slice) or ``derived`` (the parameters only; the target
derives ``K``; its sampled token is still drawn from the oracle's ``K``).

``packed=True`` makes it a packed-level Case (``sampling_packed_log_probs``):
``K`` and the sampled tokens are over the RESPONSE rows (all samples'
response tokens in order), the sampled tokens become the samples' response
tokens, and each CP rank is handed the rows of ``K`` its logits hold
(``KeptSet``'s packed rows), sliced here like any per-row data.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from harness.cases.case import Case
from harness.targets.protocol import KeptSet
from oracles import sampling as oracle

KINDS = ("random", "target_only", "whole_vocab", "one_shard", "derived", "outside")
FORMS = ("csr", "dense", "derived")
ON_OUTSIDE = oracle.ON_OUTSIDE
_STREAM_KEPT = 50  # Case.generator streams 0-6 are the Case's own


def spec(case: Case) -> dict:
    """``case.extra["sampling"]`` with its defaults filled in."""
    given = dict(case.extra.get("sampling", {}))
    out = {
        "kept": "random",
        "form": "csr",
        "on_outside": "error",
        "top_k": None,
        "top_p": None,
        "min_p": None,
        "packed": False,
    }
    unknown = set(given) - set(out)
    if unknown:
        raise ValueError(f"unknown sampling keys {sorted(unknown)}; known: {sorted(out)}")
    out.update(given)
    if out["kept"] not in KINDS or out["form"] not in FORMS or out["on_outside"] not in ON_OUTSIDE:
        raise ValueError(f"sampling spec {out}: kept in {KINDS}, form in {FORMS}, on_outside in {ON_OUTSIDE}")
    if out["form"] == "derived" and out["kept"] != "derived":
        raise ValueError("form 'derived' hands the target the sampling parameters: it needs kept='derived'")
    return out


def sampling_case(case: Case, **sampling) -> Case:
    """``case`` with the sampling spec ``sampling`` (validated)."""
    out = case.with_(extra={**case.extra, "sampling": sampling})
    spec(out)
    return out


def response_index(case: Case) -> torch.Tensor:
    """The global logits row of every response token, samples in order (the packed Case's rows of ``K``)."""
    rows = [row for sample in case.response_rows() for row in sample]
    return torch.tensor(rows, dtype=torch.long)


def sampled_logits(case: Case) -> torch.Tensor:
    """The logits rows ``K`` is over: every row at token level, the response rows of a packed Case."""
    logits = case.global_logits()
    return logits[response_index(case)] if spec(case)["packed"] else logits


def _finite(case: Case) -> torch.Tensor:
    return torch.isfinite(sampled_logits(case).double())


def _pick(candidates: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """One column per row, uniformly among the True ones (``g`` holds uniform draws in [0, 1))."""
    counts = candidates.sum(dim=1)
    choice = (g * counts).long().clamp(max=(counts - 1).clamp(min=0))
    ranks = candidates.long().cumsum(dim=1) - 1
    return ((ranks == choice[:, None]) & candidates).float().argmax(dim=1)


def kept_and_targets(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """The global bool ``[rows, V]`` kept set (before any force-keep) and the sampled token of each
    ``sampled_logits`` row."""
    s = spec(case)
    g = case.generator(_STREAM_KEPT)
    finite = _finite(case)
    rows, vocab = finite.shape
    draws = torch.rand(rows, generator=g)
    if s["kept"] == "derived":
        kept = oracle.derive_kept(sampled_logits(case), case.temperature, s["top_k"], s["top_p"], s["min_p"])
        return kept, _pick(kept, draws)
    region = finite.clone()
    if s["kept"] == "one_shard":
        region = torch.zeros_like(finite)
        width = case.vocab_local
        # the first TP shard with a finite column (masked columns are the same in every row)
        # (a packed Case may have no response rows at all: then any shard, nothing is kept)
        shard = next((k for k in range(case.tp) if bool(finite[:, k * width : (k + 1) * width].any())), 0)
        region[:, shard * width : (shard + 1) * width] = finite[:, shard * width : (shard + 1) * width]
    targets = _pick(region, draws)
    if s["kept"] == "target_only":
        kept = torch.zeros(rows, vocab, dtype=torch.bool)
    elif s["kept"] == "whole_vocab":
        kept = torch.ones(rows, vocab, dtype=torch.bool)
    else:
        kept = (torch.rand(rows, vocab, generator=g) < 0.5) & region
    kept[torch.arange(rows), targets] = True
    if s["kept"] == "outside":
        # another finite kept column so K stays non-empty, then the sampled token leaves K
        other = _pick(finite & ~torch.nn.functional.one_hot(targets, vocab).bool(), torch.rand(rows, generator=g))
        kept[torch.arange(rows), other] = True
        kept[torch.arange(rows), targets] = False
    return kept, targets


def csr_of(kept: torch.Tensor, g: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, offsets)`` of a global bool mask; with a generator each row's ids are shuffled and its first repeated."""
    ids, offsets = [], [0]
    for row in kept:
        row_ids = row.nonzero().flatten()
        if g is not None and row_ids.numel():
            row_ids = row_ids[torch.randperm(row_ids.numel(), generator=g)]
            row_ids = torch.cat([row_ids, row_ids[:1]])
        ids.append(row_ids)
        offsets.append(offsets[-1] + row_ids.numel())
    return torch.cat([torch.zeros(0, dtype=torch.long)] + ids), torch.tensor(offsets, dtype=torch.long)


def packed_tokens(case: Case) -> list[torch.Tensor]:
    """The samples' tokens with the sampled tokens as their responses (a packed Case's ``PackedInputs.tokens``)."""
    _, targets = kept_and_targets(case)
    out, start = [], 0
    for tokens, response in zip(case.tokens(), case.response_lengths):
        tokens = tokens.clone()
        if response:
            tokens[-response:] = targets[start : start + response]
        out.append(tokens)
        start += response
    return out


def held_response_rows(case: Case, cp_rank: int) -> torch.Tensor:
    """Which rows of ``K`` (response tokens, samples in order) CP rank ``cp_rank``'s logits hold, in their order."""
    position = {row: k for k, row in enumerate(response_index(case).tolist())}
    return torch.tensor([position[row] for row in case.local_rows(cp_rank) if row in position], dtype=torch.long)


def kept_set(case: Case, tp_rank: int, cp_rank: int = 0, held_only: bool = True) -> KeptSet:
    """What rank ``(tp_rank, cp_rank)`` hands the target, in the Case's form (a packed Case: its held rows).

    ``held_only=False`` hands a packed Case's every row instead (the bad input of a caller that forgot to
    slice ``K`` per CP rank).
    """
    s = spec(case)
    if s["form"] == "derived":
        return KeptSet(top_k=s["top_k"], top_p=s["top_p"], min_p=s["min_p"])
    kept, _ = kept_and_targets(case)
    if s["packed"] and held_only:
        kept = kept[held_response_rows(case, cp_rank)]
    if s["form"] == "dense":
        width = case.vocab_local
        return KeptSet(dense=kept[:, tp_rank * width : (tp_rank + 1) * width].contiguous())
    ids, offsets = csr_of(kept, case.generator(_STREAM_KEPT + 1))
    return KeptSet(ids=ids, offsets=offsets)


def tie_dependent(case: Case) -> bool:
    """Whether the derived ``K`` depends on the tie rule: a tied boundary value at top-k or top-p.

    The oracle keeps every copy (``"all"``); vLLM keeps exactly the copies top-p
    needs, which ones depending on its sort (docs/sampling.md, "Ties at the
    k-th value", "The top-p boundary"). A target following vLLM's count is
    checked on every Case where the rules agree, and reads UNSUPPORTED on the
    others: no oracle says which copies it should keep.
    """
    s, logits = spec(case), sampled_logits(case)
    rule = {"temperature": case.temperature, "top_k": s["top_k"], "top_p": s["top_p"], "min_p": s["min_p"]}
    return not torch.equal(oracle.derive_kept(logits, **rule), oracle.derive_kept(logits, **rule, ties="lowest_id"))


def capabilities(case: Case) -> set[str]:
    """What a target must declare to run this sampling Case."""
    s = spec(case)
    needed = {"sampling", f"sampling_{s['form']}"}
    if s["form"] == "derived" and s["min_p"] is not None:
        needed.add("sampling_min_p")
    if s["form"] == "derived" and tie_dependent(case):
        needed.add("sampling_ties_all")
    if s["kept"] == "outside":
        needed.add(f"sampling_{s['on_outside']}")
    if case.with_entropy:
        needed.add("sampling_entropy")
    if case.chunk_size is not None:
        needed.add("chunking")
    if case.temperature != 1.0:
        needed.add("temperature")
    if s["packed"]:
        needed.add("sampling_packed")
        if case.cp_mode != "none":
            needed.add(f"cp_{case.cp_mode}")
        if case.qkv_format == "bshd":
            needed.add("bshd")
    return needed


# ---- strategies ------------------------------------------------------------------------

DERIVED_PARAMS = st.fixed_dictionaries(
    {
        "top_k": st.sampled_from((None, 1, 2, 5, 20)),
        "top_p": st.sampled_from((None, 0.3, 0.8, 0.95)),
        "min_p": st.sampled_from((None, 0.05, 0.3)),
    }
)


@st.composite
def sampling_specs(draw, forms=FORMS, kinds=KINDS, vocab: int = 4):
    """A sampling spec: kind, form (``derived`` only with a derived kind) and the target-outside rule.

    ``outside`` needs two finite columns per row besides nothing else: it is drawn for ``vocab >= 4``
    (a quarter of the columns may be -inf), where every Case has them.
    """
    kind = draw(st.sampled_from([k for k in kinds if k != "outside" or vocab >= 4]))
    form = draw(st.sampled_from([f for f in forms if f != "derived" or kind == "derived"] or ["csr"]))
    out = {"kept": kind, "form": form, "on_outside": draw(st.sampled_from(ON_OUTSIDE))}
    if kind == "derived":
        out.update(draw(DERIVED_PARAMS))
    return out


@st.composite
def sampling_cases(draw, base, forms=FORMS, kinds=KINDS, packed: bool = False):
    """A Case from the ``base`` strategy with a sampling spec (``packed``: a packed-level one)."""
    case = draw(base)
    return sampling_case(case, **draw(sampling_specs(forms, kinds, case.vocab)), **({"packed": True} if packed else {}))
