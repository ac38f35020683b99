"""impl's hidden-state matmuls give a row the same bits wherever its operands sit in memory.

MKL's small fp32 kernels round by the operands' alignment: the same head
shard as a fresh tensor and as a view at an odd offset into a larger one (how
a TP rank's shard is often handed over) gave different last bits. The path
must not see the difference (``impl.fixed_gemm.ALIGNMENT``); in-process, one
rank, so it runs in a second.
"""

import pytest
import torch

from impl.hidden_states import hidden_log_probs_and_entropy


def _at_offset(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    """The values of ``tensor`` as a leaf view starting ``offset`` elements into a larger buffer."""
    buffer = torch.zeros(offset + tensor.numel(), dtype=tensor.dtype)
    buffer[offset:].copy_(tensor.flatten())
    return buffer[offset:].view(tensor.shape).detach().requires_grad_()


def _run(hidden, weight, targets):
    log_probs, entropy = hidden_log_probs_and_entropy(hidden, weight, targets)
    (log_probs * torch.linspace(-1, 1, log_probs.numel()) + entropy).sum().backward()
    return log_probs.detach(), entropy.detach(), hidden.grad, weight.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(12, 7, 300), (5, 13, 9), (3, 5, 1)])
def test_operands_at_any_offset_give_the_same_bits(dtype, shape):
    vocab, size, rows = shape
    g = torch.Generator().manual_seed(vocab * size + rows)
    hidden = (torch.randn(rows, size, generator=g) / size**0.5).to(dtype)
    weight = torch.randn(vocab, size, generator=g).to(dtype)
    targets = torch.randint(0, vocab, (rows,), generator=g)
    fresh = _run(hidden.clone().requires_grad_(), weight.clone().requires_grad_(), targets)
    for offset in (1, 2, 3, 5, 42):
        shifted = _run(_at_offset(hidden, offset), _at_offset(weight, offset), targets)
        for name, x, y in zip(("log_probs", "entropy", "grad(hidden)", "grad(weight)"), fresh, shifted):
            assert torch.equal(x, y), f"{name} differs with operands at offset {offset} ({dtype}, V,H,rows={shape})"
