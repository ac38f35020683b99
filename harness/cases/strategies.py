"""Hypothesis strategies for Cases.

Structure is drawn here (how many samples, their lengths, the layout, TP
size, dtype, chunking, masks, scales, special values, flags); the Case's
seed fills the bulk values. Every hard case the contract covers is reachable
and none is filtered out silently: R=0 and P=1 samples, chunk sizes of 1,
ragged, exactly N and beyond N, all-zero / all-one / mixed masks, logit
scales up to 1e4, ties, -inf columns, huge offsets, masked shards (rows whose
support a mask confines to one TP shard: every other shard all -inf),
non-unit temperatures and non-contiguous upstream gradients.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from harness.cases import case as case_module
from harness.cases import limits as case_limits
from harness.cases.case import Case
from harness.cases.topology import with_topology
from oracles import layout

TP_SIZES = (1, 2, 4)
CP_SIZES = (1, 2, 4)
CP_MODES = tuple(mode for mode in case_module.CP_MODES if mode != "none")
MAX_WORLD = 4
TOKEN_LEVEL = (1,)  # cp_sizes for token-level checks: context parallelism is a packed-path notion
DTYPES = tuple(case_module.DTYPES)
CHUNK_MODES = ("none", "one", "ragged", "equal", "beyond")
SPECIALS = case_module.SPECIALS
# Tier split (docs/gate.md): contract properties draw finite inputs only; their
# hardening twins draw at least one special value; determinism checks draw both.
FINITE = st.just([])
SPECIAL_VALUES = st.lists(st.sampled_from(SPECIALS), unique=True, min_size=1, max_size=2)
ANY_VALUES = st.lists(st.sampled_from(SPECIALS), unique=True, max_size=2)
# ``masked_shard`` confines rows to one shard OF THE CASE'S TP DEGREE: two topologies of one Case would not hold the
# same rows (the topology checks), and a kept set drawn without regard to that shard may keep only -inf logits, an
# undefined processed distribution impl rightly refuses (the sampling checks). Those draw the other special values.
LAYOUT_FREE_SPECIALS = tuple(v for v in SPECIALS if v != "masked_shard")
LAYOUT_FREE_SPECIAL_VALUES = st.lists(st.sampled_from(LAYOUT_FREE_SPECIALS), unique=True, min_size=1, max_size=2)
LAYOUT_FREE_ANY_VALUES = st.lists(st.sampled_from(LAYOUT_FREE_SPECIALS), unique=True, max_size=2)


@st.composite
def samples(draw, max_samples: int = 8, max_length: int = 64):
    """``(total, response)`` pairs: 1-8 samples of length 1-64, R=0 and P=1 included (within the target's limits)."""
    max_samples, max_length = case_limits.cap("max_samples", max_samples), case_limits.cap("max_length", max_length)
    count = draw(st.integers(1, max_samples))
    pairs = []
    for _ in range(count):
        total = draw(st.integers(1, max_length))
        response = draw(st.one_of(st.integers(0, total - 1), st.just(total - 1), st.just(0)))
        pairs.append((total, response))
    return tuple(pairs)


def chunk_size_for(mode: str, rows: int, ragged: int) -> int | None:
    """Chunk sizes relative to the rows the Function sees: None, 1, ragged, = N, > N."""
    rows = max(rows, 1)
    return {"none": None, "one": 1, "ragged": min(ragged, rows), "equal": rows, "beyond": rows + 3}[mode]


@st.composite
def cases(
    draw,
    *,
    tp=st.sampled_from(TP_SIZES),
    cp_sizes=CP_SIZES,
    cp_modes=CP_MODES,
    dtype=st.sampled_from(DTYPES),
    max_samples: int = 8,
    max_length: int = 64,
    max_vocab_local: int = 96,
    response_only=st.booleans(),
    with_entropy=st.booleans(),
    special=FINITE,
):
    """A full Case for the token, packed and policy-loss checks (finite logits unless ``special`` says otherwise).

    World sizes stay within 4 (tp x cp); context parallelism uses thd, and
    its samples straddle CP ranks, lie inside one, or have no response on
    some rank, because lengths are drawn independently of 2*cp.
    """
    tp_size = draw(tp)
    cp_size = draw(st.sampled_from([c for c in cp_sizes if tp_size * c <= MAX_WORLD] or [1]))
    cp_mode = "none" if cp_size == 1 else draw(st.sampled_from(cp_modes))
    vocab = tp_size * draw(st.integers(1, case_limits.cap("max_vocab_local", max_vocab_local)))
    pairs = draw(samples(max_samples, max_length))
    qkv_format = "thd" if cp_size > 1 else draw(st.sampled_from(("thd", "bshd")))
    pad_multiple = draw(st.sampled_from((1, 1, 2, 3, 8, 4 * tp_size)))
    is_response_only = draw(response_only)
    rows = layout.stream_rows([t for t, _ in pairs], qkv_format, pad_multiple)
    function_rows = sum(r for _, r in pairs) if is_response_only or cp_size > 1 else rows
    chunk = chunk_size_for(draw(st.sampled_from(CHUNK_MODES)), function_rows, draw(st.integers(2, 17)))
    return Case(
        seed=draw(st.integers(0, 2**16)),
        vocab=vocab,
        tp=tp_size,
        cp=cp_size,
        cp_mode=cp_mode,
        qkv_format=qkv_format,
        samples=pairs,
        mask_mode=draw(st.sampled_from(("ones", "mixed", "mixed", "zeros"))),
        pad_multiple=pad_multiple,
        chunk_size=chunk,
        dtype=draw(dtype),
        temperature=draw(st.sampled_from((1.0, 1.0, 0.7, 2.5))),
        logit_scale=draw(st.sampled_from((1.0, 1.0, 5.0, 30.0, 1e4))),
        special=tuple(draw(special)),
        with_entropy=draw(with_entropy),
        entropy_coef=draw(st.sampled_from((0.0, 0.0, 0.01, -0.5, 1.0))),
        response_only=is_response_only,
        # impl/ rejects loss-mask-only with context parallelism (a documented limitation).
        loss_mask_only=is_response_only and cp_size == 1 and draw(st.booleans()),
        noncontig_grads=draw(st.booleans()),
    )


@st.composite
def topology_pairs(draw, *, cp_sizes=CP_SIZES, **kwargs):
    """A Case (``cases(**kwargs)``) and a second topology of the same rows: TP degree, CP layout, chunk size.

    The vocabulary is a multiple of both TP degrees; a side with context
    parallelism makes both sides thd (the rows must be the same), and
    neither side is loss-mask-only then (impl rejects it with CP).
    ``cp_sizes=TOKEN_LEVEL`` keeps both sides at cp=1 (token-level checks).
    """
    case = draw(cases(cp_sizes=cp_sizes, **kwargs))
    tp2 = draw(st.sampled_from(TP_SIZES))
    cp2 = draw(st.sampled_from([c for c in cp_sizes if tp2 * c <= MAX_WORLD] or [1]))
    mode2 = "none" if cp2 == 1 else draw(st.sampled_from(CP_MODES))
    chunk2 = draw(st.one_of(st.none(), st.just(1), st.integers(2, 17)))
    both = math.lcm(case.tp, tp2)
    most = max(1, case_limits.cap("max_vocab_local", 96) * min(case.tp, tp2) // both)
    changes = {"vocab": both * draw(st.integers(1, most))}
    if cp2 > 1 or case.cp > 1:
        changes.update(qkv_format="thd", loss_mask_only=False)
    case = case.with_(**changes)
    return with_topology(case, tp=tp2, cp=cp2, cp_mode=mode2, chunk_size=chunk2)
