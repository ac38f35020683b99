"""Stand-in for vLLM's ``vllm/v1/sample/ops/topk_topp_sampler.py``: the signature of
``apply_top_k_top_p_pytorch`` with correct, independently written arithmetic (top-k keeps every copy of the
k-th value; top-p keeps the shortest descending prefix of top-k's survivors, renormalised, whose mass reaches p).

The imports below name modules that do not exist here, as the real file's do: the adapter must load the one
function without running them.
"""

import torch
from vllm import envs  # noqa: F401  (never executed by load_symbol)
from vllm.platforms import current_platform  # noqa: F401


def _top_p_drop(masked: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    probs = masked.softmax(dim=-1)
    order = probs.argsort(dim=-1, descending=True, stable=True)
    ranked = probs.gather(1, order)
    before = ranked.cumsum(dim=-1) - ranked
    drop_ranked = before >= p.unsqueeze(1)
    return torch.zeros_like(drop_ranked).scatter(1, order, drop_ranked)


def apply_top_k_top_p_pytorch(logits, k, p, allow_cpu_sync=False):
    if k is not None:
        kth = logits.topk(int(k.max()), dim=-1).values.gather(1, (k.long() - 1).unsqueeze(1))
        logits.masked_fill_(logits < kth, -float("inf"))
    if p is not None:
        logits.masked_fill_(_top_p_drop(logits, p), -float("inf"))
    return logits
