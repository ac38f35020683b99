"""Hypothesis strategies for hidden-state Cases (``harness.cases.hidden``).

The rows, TP size, dtype, chunking, temperature and flags come from the
token-level ``cases()`` strategy (cp=1, no special values: the logits are a
matmul of finite inputs); ``hidden_size`` H in 1..24 is added, and the logit
scale is drawn from 1, 5 and 30. Rows reach past ``2 x 256`` (8 samples of
up to 64 tokens, padded), so the fused path's fixed 256-row matmul blocks and
several chunks are exercised, beside one-row and one-block cases.

``many_block_cases`` draws what those never reach: over a thousand row
blocks in bf16/fp16 with a one-sign upstream (``probe_weights``), where
``grad(weight)``, one contribution per block, must not be accumulated in the
input dtype. H and V stay tiny so a quarter of a million rows costs seconds.
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.cases.strategies import TOKEN_LEVEL, TP_SIZES, cases
from harness.cases.topology import with_topology
from impl.fixed_gemm import MATMUL_BLOCK_ROWS

MAX_HIDDEN = 24


@st.composite
def hidden_cases(draw, *, tp=None, with_entropy=None, max_vocab_local: int = 32):
    options = {"cp_sizes": TOKEN_LEVEL, "special": st.just([]), "with_entropy": with_entropy or st.booleans()}
    if tp is not None:
        options["tp"] = tp
    case = draw(cases(max_vocab_local=max_vocab_local, **options))
    case = case.with_(logit_scale=draw(st.sampled_from((1.0, 1.0, 5.0, 30.0))))
    return with_hidden_size(case, draw(st.integers(1, MAX_HIDDEN)))


@st.composite
def hidden_topology_pairs(draw):
    """A hidden-state Case and a second topology of its rows: TP degree, chunk size, other rows in front.

    The vocabulary is a multiple of both TP degrees; the rows in front
    (``prefix_rows``) move the Case's rows to every position of a matmul
    block and across block boundaries (0, 1, a few, a block minus one, more
    than a block).
    """
    case = draw(hidden_cases())
    tp2 = draw(st.sampled_from(TP_SIZES))
    both = math.lcm(case.tp, tp2)
    case = case.with_(vocab=both * draw(st.integers(1, max(1, 32 * min(case.tp, tp2) // both))))
    chunk2 = draw(st.one_of(st.none(), st.just(1), st.integers(2, 3 * MATMUL_BLOCK_ROWS)))
    prefix = draw(st.sampled_from((0, 1, 3, MATMUL_BLOCK_ROWS - 1, MATMUL_BLOCK_ROWS + 5)))
    return with_topology(case, tp=tp2, chunk_size=chunk2, prefix_rows=prefix)


# bf16 loses an addend below half an ulp of the running sum: a sum of n like-signed block contributions stops
# growing near 2/eps = 256 of them, so past a thousand blocks an accumulation in bf16 is off by tens of percent.
MANY_BLOCKS = 1024


@st.composite
def many_block_cases(draw):
    """Over ``MANY_BLOCKS`` matmul row blocks in bf16/fp16, one-sign upstream, H <= 4, V_local <= 4, tp 1/2."""
    tp = draw(st.sampled_from((1, 2)))
    dtype = draw(st.sampled_from(("bfloat16", "bfloat16", "float16")))
    rows = draw(st.integers(MANY_BLOCKS, MANY_BLOCKS + 16)) * MATMUL_BLOCK_ROWS + draw(st.integers(0, 255))
    parts = draw(st.integers(1, 3))
    lengths = [rows // parts] * (parts - 1) + [rows - (rows // parts) * (parts - 1)]
    case = Case(
        seed=draw(st.integers(0, 2**16)),
        vocab=tp * draw(st.integers(1, 4)),
        tp=tp,
        samples=tuple((length, draw(st.integers(0, length - 1))) for length in lengths),
        chunk_size=draw(st.sampled_from((None, None, 300 * MATMUL_BLOCK_ROWS, rows - 1))),
        dtype=dtype,
        temperature=draw(st.sampled_from((1.0, 0.7))),
        # A one-sign sum over 2^18 rows must stay inside fp16's range (65504): small hidden states there.
        logit_scale=draw(st.sampled_from((1.0, 5.0) if dtype == "bfloat16" else (0.1,))),
        with_entropy=draw(st.booleans()),
        extra={"same_sign_upstream": True},
    )
    return with_hidden_size(case, draw(st.integers(1, 4)))
