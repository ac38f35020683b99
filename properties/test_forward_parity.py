"""Forward parity: log-probs and entropy match the float64 oracle (docs/math.md, per-token quantities).

Token level (every logits row) and packed level (per-sample responses from
thd/bshd layouts), under the tolerance policy, with TP ranks required to
agree bit for bit. Named real-model shapes sit beside the generated ones.

Tiers (docs/gate.md): finite logits are the contract; the same properties
with special values (-inf vocabulary columns, huge offsets, ties) are
hardening, so a NaN on a masked column never weighs like a wrong log-prob.
"""

import pytest
from hypothesis import example, given

from harness.cases.case import Case
from harness.cases.strategies import SPECIAL_VALUES, TOKEN_LEVEL, cases
from harness.checks.parity import check_packed_forward, check_token_forward

LLAMA_V = 32000  # Llama-2 vocabulary
QWEN_V = 151936  # Qwen2 vocabulary (SkyRL #1650)
# A TP shard whose logits are all -inf on every row (one masked column of two, one column per shard): a row's
# support confined to the other shard. The shard's local row max is -inf; killed mutant masked_shard_rescale_nan.
MASKED_SHARD = Case(seed=7, vocab=2, tp=2, samples=((6, 4),), special=("neg_inf_columns",), with_entropy=True)


@pytest.mark.tier("contract")
@given(case=cases(cp_sizes=TOKEN_LEVEL))
@example(case=Case(seed=1, vocab=LLAMA_V, tp=2, samples=((9, 4),), chunk_size=3, logit_scale=5.0))
@example(case=Case(seed=2, vocab=QWEN_V, tp=4, samples=((3, 1),), dtype="bfloat16"))
def test_token_forward_parity(case, spec):
    check_token_forward(case, spec)


@pytest.mark.tier("hardening")
@given(case=cases(cp_sizes=TOKEN_LEVEL, special=SPECIAL_VALUES))
@example(case=Case(seed=5, vocab=8, tp=2, samples=((6, 4),), special=("neg_inf_columns",)))
@example(case=MASKED_SHARD.with_(tp=4, vocab=4))
@example(case=MASKED_SHARD)
def test_token_forward_parity_special_values(case, spec):
    check_token_forward(case, spec)


@pytest.mark.tier("contract")
@given(case=cases())
@example(case=Case(seed=3, vocab=LLAMA_V, tp=2, samples=((7, 3), (5, 0), (2, 1)), pad_multiple=8))
@example(case=Case(seed=4, vocab=12, samples=((1, 0),)))
def test_packed_forward_parity(case, spec):
    check_packed_forward(case, spec)


@pytest.mark.tier("hardening")
@given(case=cases(special=SPECIAL_VALUES))
@example(case=MASKED_SHARD.with_(samples=((7, 4), (3, 2)), chunk_size=2))
def test_packed_forward_parity_special_values(case, spec):
    check_packed_forward(case, spec)
