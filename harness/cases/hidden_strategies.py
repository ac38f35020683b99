"""Hypothesis strategies for hidden-state Cases (``harness.cases.hidden``).

The rows, TP size, dtype, chunking, temperature and flags come from the
token-level ``cases()`` strategy (cp=1, no special values: the logits are a
matmul of finite inputs); ``hidden_size`` H in 1..24 is added, and the logit
scale is drawn from 1, 5 and 30. Rows reach past ``2 x 256`` (8 samples of
up to 64 tokens, padded), so the fused path's fixed 256-row matmul blocks and
several chunks are exercised, beside one-row and one-block cases.
"""

from __future__ import annotations

from hypothesis import strategies as st

from harness.cases.hidden import with_hidden_size
from harness.cases.strategies import TOKEN_LEVEL, cases

MAX_HIDDEN = 24


@st.composite
def hidden_cases(draw, *, tp=None, with_entropy=None, max_vocab_local: int = 32):
    options = {"cp_sizes": TOKEN_LEVEL, "special": st.just([]), "with_entropy": with_entropy or st.booleans()}
    if tp is not None:
        options["tp"] = tp
    case = draw(cases(max_vocab_local=max_vocab_local, **options))
    case = case.with_(logit_scale=draw(st.sampled_from((1.0, 1.0, 5.0, 30.0))))
    return with_hidden_size(case, draw(st.integers(1, MAX_HIDDEN)))
