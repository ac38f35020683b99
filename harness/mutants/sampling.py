"""Sampling-distribution replay (docs/sampling.md): the three named hazards of ``impl.sampling`` /
``impl.sampling_derive``, a CP rank reporting only its own rows' bad kept set, and min-p's regime (a
temperature other than 1), killed because the strategies draw min-p under a temperature and the property
pins it.

``min_p_before_temperature`` is a class of its own (a kept-set form's far regime: min-p under a temperature).
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant

SAMPLING = (
    Mutant(
        name="sampling_full_vocab_normaliser",
        bug="docs/sampling.md 'Why replay': the trainer normalises over the full vocabulary while the rollout "
        "normalised over the kept set K, so every log-prob carries log S (the kept mass)",
        module="impl.sampling",
        original="    rows, columns = unique_entries(rows, columns, logits.shape[1])\n",
        replacement=(
            "    every = torch.ones_like(logits, dtype=torch.bool).nonzero()  # 'K only restricts the sampler'\n"
            "    rows, columns = every[:, 0], every[:, 1]\n"
        ),
        killed_by=("regressions/test_sampling_full_vocab.py",),
        bug_class="sampling: kept set",
        representative=True,
    ),
    Mutant(
        name="sampling_target_outside_neg_inf",
        bug="docs/sampling.md 'A target outside K': force-keep is not applied, so a sampled token outside the "
        "recorded K is masked like any other column and its log-prob is -inf (a NaN/inf ratio in the loss)",
        module="impl.sampling",
        original='    if on_outside == "force_keep":\n',
        replacement="    if False:  # force-keep dropped: the sampled token is masked like any column outside K\n",
        killed_by=("regressions/test_sampling_target_outside.py",),
        bug_class="sampling: kept set",
    ),
    Mutant(
        name="sampling_top_k_per_shard",
        bug="docs/sampling.md 'Tensor parallelism': top-k derived per TP shard instead of over the whole row, so "
        "every shard keeps its own k best and K grows with the TP size",
        module="impl.sampling_derive",
        original="            candidates = gather_candidates(z.topk(width, dim=1).values, tp_group)\n",
        replacement="            candidates = z.topk(width, dim=1).values  # 'each rank knows its own top-k'\n",
        killed_by=("regressions/test_sampling_per_shard.py",),
        bug_class="sampling: kept set",
    ),
    Mutant(
        name="sampling_packed_cp_error_one_rank",
        bug="docs/sampling.md 'Packed batches and context parallelism': a target outside K raises only on the CP "
        "rank holding its row; a CP rank holding none returns values (zigzag) or waits in the all-reduce its peer "
        "never reaches (allgather)",
        module="impl.sampling_packed",
        original='    agree(cp_group, "cp_group", {}, local_error=error, device=device, fix={})\n',
        replacement="    if error is not None:  # 'a CP rank reports its own rows'\n        raise error\n",
        killed_by=("properties/test_sampling_packed.py",),
        bug_class="sampling: kept set",
    ),
    Mutant(
        name="min_p_before_temperature",
        bug="min-p applied to the raw logits instead of after the temperature (vLLM applies it to the tempered "
        "distribution): at temperature 1 nothing changes, under any other the kept set and every log-prob over "
        "it do",
        module="impl.sampling_derive",
        original="            live &= (z - m[:, None]).exp() >= min_p\n",
        replacement="            live &= ((z - m[:, None]) * temperature).exp() >= min_p\n",
        killed_by=("properties/test_sampling.py",),
        bug_class="sampling: min-p under a temperature",
        representative=True,
    ),
)
