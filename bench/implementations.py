"""The implementations the benchmarks compare, each as ``run(logits, targets) -> (log_probs, entropy)``.

* ``naive``: plain torch autograd (fp32 ``log_softmax`` + gather, softmax entropy);
* ``impl`` and ``impl-donate``: this repository's fused Function with a
  cache-friendly chunk (``impl.token_level.cache_friendly_chunk_rows``);
* peers, where they load: SkyRL's ``DistributedLogprob`` + ``vocab_parallel_entropy``
  from the INSTALLED ``skyrl`` package (``pip install --no-deps skyrl==0.3.0``;
  nothing of it is copied here), on a single-rank process group and the harness's
  stand-in for the ``megatron.core.parallel_state`` lookups it makes
  (``harness.targets.upstream.megatron_stand_in``);
* the other peers (TRL, ms-swift) through their adapters (``bench.peers``).

Each entry is measured on a single rank (tp = 1).
"""

from __future__ import annotations

import contextlib
import importlib.util
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from harness.targets.upstream import megatron_stand_in
from impl.token_level import cache_friendly_chunk_rows, log_probs_and_entropy

SKYRL_FILE = "backends/skyrl_train/distributed/megatron/model_utils.py"


def naive(logits: torch.Tensor, targets: torch.Tensor):
    log_p = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    return log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy


def fused(logits, targets):
    return log_probs_and_entropy(logits, targets, chunk_size=cache_friendly_chunk_rows(logits.shape[-1]))


def fused_donating(logits, targets):
    chunk_size = cache_friendly_chunk_rows(logits.shape[-1])
    return log_probs_and_entropy(logits, targets, chunk_size=chunk_size, donate_logits=True)


def _single_rank_group() -> None:
    if not dist.is_initialized():
        rendezvous = Path(tempfile.mkdtemp(prefix="lph-bench-")) / "rendezvous"
        dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)


def _parallel_state_stand_in() -> None:
    """The parallel-state lookups SkyRL's model utilities make, for one rank: the harness's stand-in, which also
    answers ms-swift's ``mpu`` (a private stand-in without ``mpu`` registered first would hide it from that peer)."""
    megatron_stand_in.install()
    megatron_stand_in.set_groups(None, None)


def load_skyrl() -> Callable | None:
    """SkyRL's token-level log-prob + entropy from the installed package, or None if it is not installed."""
    spec = importlib.util.find_spec("skyrl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SKYRL_FILE
    if not path.is_file():
        return None
    _single_rank_group()
    _parallel_state_stand_in()
    torch._dynamo.config.disable = True  # its entropy uses torch.compile; run it eagerly on CPU
    module_spec = importlib.util.spec_from_file_location("lph_peer_skyrl_model_utils", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)

    def run(logits, targets):
        # SkyRL's convention is [B, S, V_local]; its 2-D backward path still builds a one_hot.
        batched, vocab = logits.unsqueeze(0), logits.shape[-1]
        log_probs = module.DistributedLogprob.apply(batched, targets.unsqueeze(0), 0, vocab, dist.group.WORLD, False)
        return log_probs.squeeze(0), module.vocab_parallel_entropy(batched).squeeze(0)

    return run


MEMORY_CHUNK = 1024  # slime's reference setting (docs/math.md); the cache-sized speed chunk only lowers the working set


def fused_reference_chunk(logits, targets):
    return log_probs_and_entropy(logits, targets, chunk_size=MEMORY_CHUNK)


def fused_donating_reference_chunk(logits, targets):
    return log_probs_and_entropy(logits, targets, chunk_size=MEMORY_CHUNK, donate_logits=True)


def implementations(for_memory: bool = False) -> dict[str, Callable]:
    """Every implementation that loads here, by name.

    ``for_memory``: ``impl`` runs with chunk 1024, the setting of the reference
    measurements; with the speed table's cache-sized chunk its peak is lower
    still, but the fake-tensor sweep would dispatch hundreds of thousands of ops.
    """
    if for_memory:
        table = {"naive": naive, "impl": fused_reference_chunk, "impl-donate": fused_donating_reference_chunk}
    else:
        table = {"naive": naive, "impl": fused, "impl-donate": fused_donating}
    skyrl = load_skyrl()
    if skyrl is not None:
        from importlib.metadata import version

        table[f"skyrl-{version('skyrl')}"] = skyrl
    from bench.peers import token_peers

    table.update(token_peers())
    return table


class AsTarget:
    """Present a benchmark callable to ``harness.memory.logits.measure_token_memory``."""

    def __init__(self, run: Callable):
        self.run = run

    def token_log_probs(self, logits, targets, **_):
        return self.run(logits, targets)


@contextlib.contextmanager
def single_rank_collectives():
    """On one rank every all-reduce is the identity: skip it, so fake tensors never reach gloo."""
    original = dist.all_reduce
    dist.all_reduce = lambda tensor, *args, **kwargs: None
    try:
        yield
    finally:
        dist.all_reduce = original
