"""CPU forward+backward time of each implementation (pytest-benchmark; run by ``nox -s bench``).

Every implementation computes log-probs and entropy of the same fp32 logits,
then backpropagates ``sum(log_probs) + sum(entropy)``. The logits are rebuilt
before every round (donation consumes them), outside the timed region.
"""

import pytest
import torch

from bench.implementations import implementations

SHAPES = {"4096x32000": (4096, 32_000), "1024x151936": (1024, 151_936), "2048x8192": (2048, 8_192)}
IMPLEMENTATIONS = implementations()


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_forward_backward(benchmark, name, shape):
    rows, vocab = SHAPES[shape]
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(rows, vocab, generator=generator) * 3
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    run = IMPLEMENTATIONS[name]

    def setup():
        return (base.clone().requires_grad_(),), {}

    def step(logits):
        log_probs, entropy = run(logits, targets)
        (log_probs.sum() + entropy.sum()).backward()

    benchmark.extra_info.update(implementation=name, shape=shape)
    benchmark.pedantic(step, setup=setup, rounds=3, iterations=1, warmup_rounds=1)
