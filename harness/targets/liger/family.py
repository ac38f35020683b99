"""Liger-Kernel (linkedin/Liger-Kernel): ``liger==X`` or ``liger=PATH``.

The generated page (docs/records/families/liger.md) says what each entry calls and translates; this says why.
The entries call the autograd Functions, each the composition of its Triton kernels: the ``nn.Module`` and
functional wrappers (``LigerVocabParallelCrossEntropy``, ``LigerMegatronCrossEntropy``,
``liger_fused_linear_cross_entropy``) only forward their arguments to them and live beside the package's
``__init__`` imports, which the loader never runs. On a CPU the kernels run under Triton's interpreter. Both
Functions return the per-token loss: ``log_probs = -loss``, the targets global ids, never Liger's
``ignore_index`` (``-100``). Liger's one-rank ``LigerCrossEntropyFunction`` alone is ``one_rank`` (a
``module:attr`` spec): it writes the logits' gradient into its input during forward (its design: a trainer
never reads the LM-head output again), so that entry hands it a tensor of its own, the gathered logits at
TP > 1, a copy at one rank (charged to Liger by the memory checks).
"""

from __future__ import annotations

from harness.targets.upstream import calls
from harness.targets.upstream.family import Entry, Family, Module, Symbol
from harness.targets.upstream.locate import Locate
from harness.targets.upstream.whole_vocab import gather_vocabulary

IGNORE_INDEX = -100  # Liger's default; never a valid vocabulary id
# Under Triton's CPU interpreter the fused kernel costs about 3.2 ms per row (0.8.5, fp32, H 2, V 4: 3.3 s for
# 1024 rows, 13.0 s for 4096): a thousand 256-row blocks would take a quarter of an hour per call.
CPU_CASE_LIMITS = {"max_hidden_rows": 16_384}


def token(up, call: calls.TokenCall):
    """Vocab-parallel through its own ``tp_group``: Megatron's ``[seq, batch, V_local]`` logits and
    ``[seq, batch]`` targets as ``batch = 1`` (a view), its shard offset ``rank * V_local`` (the harness's layout),
    no label smoothing (formula and mode then do not matter)."""
    batched, targets = call.logits.unsqueeze(1), call.targets.unsqueeze(1)  # Megatron's [seq, batch = 1, ...]
    loss = up.LigerVocabParallelCEFunction.apply(
        batched, targets, call.tp_group, IGNORE_INDEX, 0.0, "pytorch", "global"
    )
    return -loss.squeeze(1), None


def hidden(up, call: calls.HiddenCall):
    """``reduction="none"``; since 0.8 its backward recomputes the chunked logits and folds the per-token
    upstream gradient in before ``grad_weight`` is summed."""
    loss = up.LigerFusedLinearCrossEntropyFunction.apply(
        call.hidden, call.weight, call.targets, None, None, IGNORE_INDEX, 0.0, 0.0, "none"
    )[0]
    return -loss, None


def one_rank_token(up, call: calls.TokenCall):
    whole = gather_vocabulary(call.logits, call.tp_group)
    if whole is call.logits:  # one rank: Liger would write its gradient into the caller's logits
        whole = call.logits.clone()
    loss = up.LigerCrossEntropyFunction.apply(whole, call.targets, None, IGNORE_INDEX, 0.0, 0.0, "none")[0]
    return -loss, None


NOT_DECLARED = {
    "entropy": "none returned",
    "temperature": "no such argument: Liger's callers divide the logits themselves (softcap is another transform)",
    "chunking": "no chunk argument on the token path; the fused linear path picks its own chunk "
    "(next_power_of_2(ceil(rows / ceil(V / H))) rows), not the caller's, and a Triton launch has no data to run on "
    "under the fake tensors of the one_hot regression",
    "packed": "Liger's cross entropy is token level",
    "hidden_tp": "the fused linear cross entropy holds the whole vocabulary (the vocab-parallel one takes logits)",
}
_OPS = "liger_kernel.ops"
LIGER = Family(
    name="liger",
    locate=Locate("liger_kernel", "liger_kernel/ops/cross_entropy.py", "LPH_LIGER_PATH", pypi="liger-kernel"),
    modules={
        "vocab_parallel": Module((f"{_OPS}.vocab_parallel_cross_entropy",)),
        "fused_linear": Module((f"{_OPS}.fused_linear_cross_entropy",)),
    },
    symbols={
        "LigerVocabParallelCEFunction": Symbol("vocab_parallel", ("LigerVocabParallelCEFunction",)),
        "LigerFusedLinearCrossEntropyFunction": Symbol("fused_linear", ("LigerFusedLinearCrossEntropyFunction",)),
    },
    entries=(
        Entry(
            "token_log_probs",
            ("LigerVocabParallelCEFunction",),
            token,
            frozenset({"token"}),
            since="the vocab-parallel cross entropy (ops/vocab_parallel_cross_entropy.py) arrived in Liger 0.8.1",
        ),
        Entry("hidden_log_probs", ("LigerFusedLinearCrossEntropyFunction",), hidden, frozenset({"hidden"})),
    ),
    not_declared=NOT_DECLARED,
    expectations=("liger.toml",),
    triton=True,
    cpu_case_limits=CPU_CASE_LIMITS,
)
ONE_RANK = Family(
    name="liger",
    locate=LIGER.locate,
    modules={"cross_entropy": Module((f"{_OPS}.cross_entropy",))},
    symbols={"LigerCrossEntropyFunction": Symbol("cross_entropy", ("LigerCrossEntropyFunction",))},
    entries=(Entry("token_log_probs", ("LigerCrossEntropyFunction",), one_rank_token, frozenset({"token"})),),
    not_declared={key: why for key, why in NOT_DECLARED.items() if key != "hidden_tp"}
    | {
        "vocab_parallel": "LigerCrossEntropyFunction takes the whole vocabulary: under TP the shards are gathered first"
    },
    triton=True,
)


def one_rank(where=None):
    """Liger's one-rank ``LigerCrossEntropyFunction`` alone (``harness.targets.liger.family:one_rank``)."""
    return ONE_RANK.target(where)
