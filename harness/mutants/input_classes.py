"""Input classes the generator once never drew (a row selection with donation, many low-precision blocks): each
mutant is exposed by that class only.
"""

from __future__ import annotations

from harness.mutants.mutant import Mutant

INPUT_CLASSES = (
    Mutant(
        name="donated_unselected_rows_keep_logits",
        bug="input class 'donation combined with row selection': with donate_logits=True and rows=, the rows never "
        "evaluated are not zeroed ('their gradient is 0, nothing to write'), so the returned gradient holds the "
        "logits there; without rows, or without donation (a fresh zero buffer), nothing changes",
        module="impl.row_stats",
        original="        buffer.masked_fill_(unselected.unsqueeze(1), 0)\n",
        replacement="        pass  # 'rows never evaluated get no write'\n",
        killed_by=("properties/test_donation.py",),
        bug_class="input class: donation with row selection",
        representative=True,
    ),
    Mutant(
        name="donated_rows_zeroed_before_read",
        bug="input class 'donation combined with row selection', Triton backend: the donated buffer is zeroed "
        "whole before the backward ('unselected rows must read 0') although it IS the logits the kernel reads "
        "its selected rows from, so every selected row's gradient is computed from zeros",
        module="impl.row_stats",
        original="        buffer.masked_fill_(unselected.unsqueeze(1), 0)\n",
        replacement="        buffer.zero_()\n",
        killed_by=("properties/test_donation.py",),
        target="impl-triton",
        bug_class="input class: donation with row selection",
    ),
    Mutant(
        name="hidden_weight_grad_input_dtype_accumulation",
        bug="input class 'low-precision accumulation across many blocks': the hidden-state path adds each row "
        "block's grad(weight) contribution to a running sum kept in the weight's dtype ('the head is bf16 "
        "anyway'); exact in fp32, and within tolerance in bf16/fp16 over the few blocks the ordinary shapes hold",
        module="impl.fixed_gemm",
        original="                grad_weight[cols].add_(torch.mm(tile[:, : end - start], rows))\n",
        replacement=(
            "                block = tile[:, : end - start].mm(rows).to(self.weight.dtype)\n"
            "                grad_weight[cols].copy_(grad_weight[cols].to(self.weight.dtype).add_(block))\n"
        ),
        # The many-blocks check is the one that reaches the regime (the rest of the file passes on it by design).
        killed_by=("properties/test_hidden_states.py::test_hidden_weight_grad_many_blocks",),
        bug_class="input class: low-precision accumulation",
        representative=True,
    ),
)
