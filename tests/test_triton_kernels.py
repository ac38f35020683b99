"""The Triton kernels on their own, under Triton's CPU interpreter (run by the Triton pass of ``nox -s tests``).

What the suite's properties cannot see from outside the Function:

* a row's bits never depend on the rows launched with it (the kernel half
  of chunk invariance, docs/triton.md): each row alone, all rows in one
  launch and the rows in another order give identical statistics and
  gradients, in every dtype, with ``-inf`` columns and an all ``-inf`` row;
* the statistics of a row spanning several tiles (the online rescale)
  match a float64 computation of the same quantities;
* the custom ops have fake implementations (FakeTensorMode allocates nothing);
* forcing the Triton backend where it cannot run is a clear error, and
  ``auto`` keeps CPU tensors on the torch backend.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from harness.mutants.runner import ROOT
from harness.ranks.device import device_type
from harness.targets import load_target

pytest.importorskip("triton")
if device_type() != "cpu":
    pytest.skip("CPU-interpreter tests of the kernels; on CUDA the suite runs them", allow_module_level=True)
load_target("impl-triton")  # switches this process to the interpreter before the kernels are imported

from impl.backend import TORCH, resolve_backend  # noqa: E402
from impl.triton.kernels import FORWARD_TILE, block_columns, row_stats, write_grad  # noqa: E402

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _logits(rows: int, cols: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, cols, generator=generator) * 4
    logits[:, 1::7] = float("-inf")  # masked vocabulary columns
    logits[2] = float("-inf")  # a row whose whole shard is masked (another TP rank holds its mass)
    return logits.to(dtype)


def _stats(logits, row_index, targets):
    return row_stats(logits, row_index, targets, 0, 0.7, True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_bits_do_not_depend_on_the_rows_launched_with_it(dtype):
    rows, cols = 70, 75  # more rows than one interpreted program holds; several column tiles
    logits = _logits(rows, cols, dtype)
    targets = torch.randint(0, cols, (rows,), generator=torch.Generator().manual_seed(1))
    together = _stats(logits, None, targets)
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(2))
    shuffled = _stats(logits, order, targets[order])
    for row in (0, 1, 2, 3, 31, 63, 64, rows - 1):  # program boundaries (64 rows each) and the masked row
        alone = _stats(logits, torch.tensor([row]), targets[row : row + 1])
        for got in (alone, tuple(t[(order == row).nonzero()[0]] for t in shuffled)):
            assert torch.equal(got[0], together[0][row : row + 1]), f"row {row}: max differs"
            assert torch.equal(got[1], together[1][row : row + 1]), f"row {row}: statistics differ"

    shift = torch.randn(rows)
    grads = torch.randn(rows), torch.randn(rows), torch.rand(rows)
    full = torch.zeros_like(logits)
    write_grad(full, logits, None, targets, shift, *grads, 0, 0.7)
    for row in (0, 2, 63, 64, rows - 1):
        alone = torch.zeros_like(logits)
        index = torch.tensor([row])
        write_grad(alone, logits, index, targets[index], shift[index], *(g[index] for g in grads), 0, 0.7)
        assert torch.equal(alone[row], full[row]), f"row {row}: gradient differs"
        assert not alone[torch.arange(rows) != row].any(), "a row outside row_index was written"


def test_statistics_across_tiles_match_float64():
    rows, cols = 6, 150
    assert block_columns(cols, FORWARD_TILE) < cols, "the row must span several tiles"
    logits = _logits(rows, cols, torch.float32)
    logits[0, 149] = 40.0  # the row max arrives in the last tile: every earlier lane is rescaled
    targets = torch.tensor([149, 3, 0, 1, 148, 77])
    local_max, stats = row_stats(logits, None, targets, 0, 1.0, True)
    z = logits.double()
    ref_max = z.max(dim=1).values
    shifted = z - torch.where(ref_max.isinf(), 0.0, ref_max)[:, None]
    p = shifted.exp()
    ref_sum = p.sum(dim=1)
    ref_ent = torch.where(p > 0, p * shifted, 0.0).sum(dim=1)
    ref_target = shifted.gather(1, targets[:, None]).squeeze(1)
    assert torch.equal(local_max.double(), ref_max.float().double())
    torch.testing.assert_close(stats[:, 0].double(), ref_sum, rtol=1e-6, atol=0)
    torch.testing.assert_close(stats[:, 2].double(), ref_ent, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats[:, 1].double(), ref_target, rtol=1e-6, atol=0)
    assert stats[2, 0] == 0 and stats[2, 2] == 0, "an all -inf row adds nothing, never NaN"


def test_custom_ops_have_fake_implementations():
    with FakeTensorMode():
        logits = torch.empty(205_280, 76_032)
        targets = torch.zeros(205_280, dtype=torch.long)
        local_max, stats = row_stats(logits, None, targets, 0, 1.0, True)
        assert local_max.shape == (205_280,) and stats.shape == (205_280, 3)
        per_row = torch.zeros(205_280)
        write_grad(logits, None, None, targets, per_row, per_row, None, None, 0, 1.0)


def test_auto_keeps_cpu_tensors_on_torch():
    assert resolve_backend(torch.zeros(2, 3)) == TORCH


def test_forcing_triton_on_cpu_without_the_interpreter_is_a_clear_error():
    code = (
        "import torch\n"
        "from impl.backend import use_backend\n"
        "from impl.token_level import log_probs_and_entropy\n"
        "with use_backend('triton'):\n"
        "    log_probs_and_entropy(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "TRITON_INTERPRET=1" in proc.stderr, proc.stderr[-2000:]


COMPILE_FOR_H100 = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import impl.triton.kernels as k
common = {"n_rows": "i32", "n_cols": "i32", "target_offset": "i64", "temperature": "fp32"}
stats = dict(common, logits_ptr="*bf16", row_index_ptr="*i64", targets_ptr="*i64", max_ptr="*fp32",
             stats_ptr="*fp32", stride_row="i64", stride_col="i64")
grad = dict(common, src_ptr="*bf16", dst_ptr="*bf16", row_index_ptr="*i64", targets_ptr="*i64", shift_ptr="*fp32",
            grad_log_probs_ptr="*fp32", grad_entropy_ptr="*fp32", entropy_ptr="*fp32", src_stride_row="i64",
            src_stride_col="i64", dst_stride_row="i64", dst_stride_col="i64")
flags = {"HAS_ROW_INDEX": True, "SCALED": True, "BLOCK_R": 1, "BLOCK_V": 4096}
for kernel, signature, extra in ((k._row_stats_kernel, stats, {"WITH_ENTROPY": True, "N_STATS": 3}),
                                 (k._grad_kernel, grad, {"ENTROPY_GRAD": True})):
    constexprs = dict(flags, **extra)
    signature = dict(signature, **{name: "constexpr" for name in constexprs})
    compiled = triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 8})
    assert "cubin" in compiled.asm, kernel
print("compiled")
"""


def test_kernels_compile_for_an_h100_without_one():
    """The interpreter does not compile: this builds both kernels (bf16, every branch) into sm_90 cubins."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    proc = subprocess.run([sys.executable, "-c", COMPILE_FOR_H100], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and "compiled" in proc.stdout, proc.stderr[-3000:]
