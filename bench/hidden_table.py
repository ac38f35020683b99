"""Hidden-state path: impl vs the unfused path vs torch's ``linear_cross_entropy``, time and peak, same shapes.

``python -m bench.hidden_table`` (run by ``nox -s bench``) writes
``reports/bench/hidden.json`` and prints a markdown table. Per shape
``(rows, H, V)``, fp32, one rank, forward + backward of ``sum(log_probs)``
(no entropy: torch's op has none; impl with entropy is listed beside it):

* ``impl``: ``impl.hidden_states`` (chunk 1024 rows, entropy off);
* ``impl+entropy``: the same with the entropy and its gradient;
* ``unfused``: ``hidden @ weight.T`` (full fp32 logits) then ``impl.token_level``;
* ``torch-chunked``: ``linear_cross_entropy(..., options=LinearCrossEntropyOptions(batch_chunk_size=1024))``;
* ``torch-reference``: ``linear_cross_entropy(..., options=None)`` (logits, then cross-entropy).

Time: median of ``ROUNDS`` timed runs after one warm-up (inputs rebuilt
outside the timed region). Peak: the live-storage tracker of
``harness.memory`` on real tensors of the same shape, inputs and gradients
included. Then the real scale (T=205,280, H=4096, V=151,936 at tp 8) under
fake tensors for the paths that trace there.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from harness.hidden_memory import REAL_SCALES, HiddenMemoryCase, measure_hidden_memory
from impl.hidden_states import hidden_log_probs_and_entropy
from impl.token_level import log_probs_and_entropy

OUT = Path("reports/bench")
CHUNK = 1024
ROUNDS = 3
SHAPES = {"2048x256x16384": (2048, 256, 16_384), "1024x512x32000": (1024, 512, 32_000)}


def impl(hidden, weight, targets):
    return hidden_log_probs_and_entropy(hidden, weight, targets, chunk_size=CHUNK, with_entropy=False)


def impl_entropy(hidden, weight, targets):
    return hidden_log_probs_and_entropy(hidden, weight, targets, chunk_size=CHUNK, with_entropy=True)


def unfused(hidden, weight, targets):
    return log_probs_and_entropy(hidden @ weight.T, targets, chunk_size=CHUNK, with_entropy=False)


def _torch(options):
    def run(hidden, weight, targets):
        loss = torch.nn.functional.linear_cross_entropy(hidden, weight, targets, reduction="none", options=options())
        return -loss, None

    return run


PATHS = {
    "impl": impl,
    "impl+entropy": impl_entropy,
    "unfused": unfused,
    "torch-chunked": _torch(lambda: torch.nn.LinearCrossEntropyOptions(batch_chunk_size=CHUNK)),
    "torch-reference": _torch(lambda: None),
}


def _inputs(rows: int, hidden_size: int, vocab: int):
    g = torch.Generator().manual_seed(0)
    hidden = (torch.randn(rows, hidden_size, generator=g) / hidden_size**0.5).requires_grad_()
    weight = (torch.randn(vocab, hidden_size, generator=g) * 3).requires_grad_()
    return hidden, weight, torch.randint(0, vocab, (rows,), generator=g)


def _step(run, hidden, weight, targets) -> None:
    log_probs, entropy = run(hidden, weight, targets)
    loss = log_probs.sum() + (entropy.sum() if entropy is not None else 0.0)
    loss.backward()


def time_path(run, shape) -> float:
    times = []
    for round_ in range(ROUNDS + 1):
        hidden, weight, targets = _inputs(*shape)
        start = time.perf_counter()
        _step(run, hidden, weight, targets)
        if round_:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_path(run, shape, fake: bool) -> int:
    rows, hidden_size, vocab = shape
    case = HiddenMemoryCase(rows=rows, hidden_size=hidden_size, vocab_local=vocab, chunk_size=CHUNK)
    return measure_hidden_memory(case, run, fake=fake).peak


def main() -> None:
    table: dict = {"shapes": {}, "real_scale": {}}
    for label, shape in SHAPES.items():
        for name, run in PATHS.items():
            seconds = time_path(run, shape)
            peak = peak_path(run, shape, fake=False)
            table["shapes"].setdefault(label, {})[name] = {"seconds": seconds, "peak_bytes": peak}
            print(f"{label:16} {name:16} {seconds:8.3f} s  peak {peak / 2**20:9.1f} MiB", flush=True)
    real = REAL_SCALES["qwen-tp8-fp32"]
    for name in ("impl+entropy", "impl", "unfused", "torch-chunked"):
        try:
            peak = peak_path(PATHS[name], (real.rows, real.hidden_size, real.vocab_local), fake=True)
            table["real_scale"][name] = {"peak_bytes": peak, "chunks_of_logits": None}
            print(f"real scale {name:16} peak {peak / 2**30:7.3f} GiB", flush=True)
        except Exception as exc:  # noqa: BLE001 - a path that cannot trace under fake tensors is reported, not fatal
            table["real_scale"][name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            print(f"real scale {name:16} not measurable under fake tensors: {table['real_scale'][name]['error']}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "hidden.json").write_text(json.dumps(table, indent=2))
    print("\n| shape (rows x H x V) | path | fwd+bwd time (s) | peak (MiB) |\n|---|---|---|---|")
    for label, paths in table["shapes"].items():
        for name, row in paths.items():
            print(f"| {label} | {name} | {row['seconds']:.3f} | {row['peak_bytes'] / 2**20:.1f} |")
    print(f"wrote {OUT / 'hidden.json'}")


if __name__ == "__main__":
    main()
