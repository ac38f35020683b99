"""The named regressions' bugs that apply to a kernel, re-created in the Triton backend (docs/triton.md says
which do not apply and why: one_hot is a torch-code mechanism; bugs 4/5's CP redistribution sits above it).
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant

TRITON = (
    Mutant(
        name="triton_entropy_term_dropped",
        bug="docs/bugs.md #1 in the kernel: the Triton backward reads its entropy flag inverted and launches the "
        "gradient kernel without the entropy term exactly when an entropy gradient arrives (coef != 0)",
        module="impl.triton.launch",
        original="    entropy_term = entropy is not None  # an entropy gradient arrived: "
        "the gate is on and the loss uses the entropy\n",
        replacement="    entropy_term = entropy is None  # inverted\n",
        killed_by=("regressions/test_inverted_no_grad_gate.py",),
        target="impl-triton",
        bug_class="Triton kernels",
        representative=True,
    ),
    Mutant(
        name="triton_forward_stores_shifted_logits",
        bug="docs/bugs.md #2 in the kernel (verl #1672, Megatron cross-entropy): the forward kernel stores its "
        "shifted tile back over the input logits; a Triton store bumps no version counter",
        module="impl.triton.kernels",
        original="        probs = tl.exp(shifted)\n",
        replacement=(
            "        tl.store(base + cols.to(tl.int64)[None, :] * stride_col, "
            "shifted.to(logits_ptr.dtype.element_ty), mask=mask)\n"
            "        probs = tl.exp(shifted)\n"
        ),
        killed_by=("regressions/test_inplace_version_counter.py",),
        target="impl-triton",
        bug_class="Triton kernels",
    ),
    Mutant(
        name="triton_backward_writes_over_logits",
        bug="docs/bugs.md #2 in the kernel: the backward writes the gradient over the logits although they were not "
        "donated ('saves a [rows, V] buffer'), corrupting every other reader of them",
        module="impl.triton.launch",
        original=(
            "    grad_logits = gradient_buffer(logits, row_index, donate)\n    source = None if donate else logits\n"
        ),
        replacement="    grad_logits = gradient_buffer(logits, row_index, True)\n    source = None\n",
        killed_by=("regressions/test_inplace_version_counter.py",),
        target="impl-triton",
        bug_class="Triton kernels",
    ),
    Mutant(
        name="triton_rank_without_targets_skips_max",
        bug="docs/bugs.md #5, hang class, in the Triton backend's TP combination: a TP rank whose shard holds none of "
        "the targets skips the row-max all-reduce ('its max changes nothing'), so its peers wait in it",
        module="impl.triton.launch",
        original="    all_reduce_max(global_max, tp_group)\n",
        replacement=(
            "    if bool(in_shard.any()):  # no target in this shard: 'its max changes nothing'\n"
            "        all_reduce_max(global_max, tp_group)\n"
        ),
        killed_by=("regressions/test_dsa_hang.py",),
        target="impl-triton",
        bug_class="Triton kernels",
    ),
)
