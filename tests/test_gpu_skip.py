"""The GPU path without a GPU: device choice logic, the CPU default unchanged, and the clean skips.

``nox -s gpu`` (docs/usage.md, "GPU") needs CUDA for its real work; what can be
checked anywhere is checked here: ``harness.ranks.device``'s backend and device
choice as a pure function of the device count, that ``LPH_DEVICE`` unset
leaves every tensor where it was, that the GPU scripts skip with a clear
message and exit 0 when torch sees no CUDA device (forced with
``CUDA_VISIBLE_DEVICES=""``, so this runs on a GPU machine too), and the
report and tolerance plumbing those scripts share with the CPU suite.
"""

import json
import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from harness.memory.logits import MemoryCase
from harness.ranks import device

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("kind", "world_size", "device_count", "expected"),
    [
        ("cpu", 1, 0, "gloo"),
        ("cpu", 4, 8, "gloo"),  # LPH_DEVICE=cpu ignores GPUs
        ("cuda", 1, 1, device.NCCL_WITH_CPU_FALLBACK),
        ("cuda", 2, 1, "gloo"),  # one GPU shared by the TP/CP ranks: gloo with CUDA tensors
        ("cuda", 4, 1, "gloo"),
        ("cuda", 4, 2, "gloo"),  # fewer GPUs than ranks: NCCL refuses two ranks on one GPU
        ("cuda", 2, 2, device.NCCL_WITH_CPU_FALLBACK),  # one process per GPU
        ("cuda", 4, 8, device.NCCL_WITH_CPU_FALLBACK),
    ],
)
def test_backend_choice(kind, world_size, device_count, expected):
    assert device.backend_for(world_size, kind, device_count) == expected


def test_no_gpu_with_cuda_requested_is_a_clear_error():
    with pytest.raises(RuntimeError, match="LPH_DEVICE=cuda"):
        device.backend_for(2, "cuda", 0)


@pytest.mark.parametrize(("rank", "count", "expected"), [(0, 1, 0), (3, 1, 0), (3, 4, 3), (5, 4, 1)])
def test_rank_device_index(rank, count, expected):
    assert device.device_index(rank, count) == expected


def test_device_type_from_the_environment(monkeypatch):
    monkeypatch.delenv(device.ENV_VAR, raising=False)
    assert device.device_type() == "cpu"
    monkeypatch.setenv(device.ENV_VAR, " CUDA ")
    assert device.device_type() == "cuda"
    monkeypatch.setenv(device.ENV_VAR, "tpu")
    with pytest.raises(ValueError, match="LPH_DEVICE='tpu'"):
        device.device_type()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_without_cuda_names_the_variable(monkeypatch):
    monkeypatch.setenv(device.ENV_VAR, "cuda")
    with pytest.raises(RuntimeError, match="LPH_DEVICE=cuda but no CUDA device"):
        device.current()


def test_cpu_default_moves_nothing(monkeypatch):
    """LPH_DEVICE unset: the very same tensor objects, and results pass through untouched."""
    monkeypatch.delenv(device.ENV_VAR, raising=False)
    assert device.current() == torch.device("cpu")
    x = torch.arange(3.0)
    assert device.to_device(x) is x
    Pair = namedtuple("Pair", "a b")
    result = {"grad": x, "values": [x, None], "pair": Pair(x, 1), "flags": (True, x), "trace": ["op"]}
    host = device.to_host(result)
    assert host["grad"] is x and host["values"][0] is x and host["values"][1] is None
    assert isinstance(host["pair"], Pair) and host["pair"].a is x and host["flags"][1] is x
    assert host["trace"] == ["op"]


def test_cpu_jobs_return_the_same_results_as_before(monkeypatch):
    """The device plumbing of harness/jobs/logits.py is a no-op on the CPU: results equal a direct computation."""
    from harness.cases.case import Case
    from harness.jobs.logits import token_job
    from harness.ranks.run import _local_context
    from impl.token_level import log_probs_and_entropy

    monkeypatch.delenv(device.ENV_VAR, raising=False)
    case = Case(seed=3, vocab=16, samples=((6, 3),), dtype="bfloat16", chunk_size=2)
    result = token_job({"case": case.to_json(), "spec": "impl"}, _local_context())
    logits = case.rank_logits(0).requires_grad_()
    log_probs, _ = log_probs_and_entropy(logits, case.row_targets(), chunk_size=2, with_entropy=True)
    assert result["log_probs"].device.type == "cpu" and result["grad"].device.type == "cpu"
    assert torch.equal(result["log_probs"], log_probs.detach())


def _run_without_cuda(module: str, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop(device.ENV_VAR, None)
    return subprocess.run(
        [sys.executable, "-m", module, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("module", ["bench.gpu_calibration", "bench.gpu_bench", "bench.gpu_hidden", "bench.gpu_tune"])
def test_gpu_scripts_skip_cleanly_without_cuda(module, tmp_path):
    out = tmp_path / "gpu"
    proc = _run_without_cuda(module, out)
    assert proc.returncode == 0, proc.stderr
    assert f"python -m {module}: no CUDA device (torch {torch.__version__}" in proc.stdout
    assert proc.stdout.rstrip().endswith(": skipped")
    assert not out.exists(), "a skipped run must not write reports"


def test_calibration_margin_and_report(tmp_path):
    from bench.gpu_calibration import MARGIN, compare, write_reports

    case = MemoryCase(rows=4096, vocab_local=32_000)
    inside = compare("inside", case, predicted=1000, measured=int(1000 * (1 + MARGIN * 0.9)))
    outside = compare("outside", case, predicted=1000, measured=int(1000 * (1 + MARGIN * 1.1)))
    below = compare("below", case, predicted=1000, measured=int(1000 * (1 - MARGIN * 1.1)))
    assert inside["within_margin"] and not outside["within_margin"] and not below["within_margin"]
    write_reports([inside, outside], "test device", tmp_path)
    assert "| outside |" in (tmp_path / "calibration.md").read_text()
    assert '"margin": 0.05' in (tmp_path / "calibration.json").read_text()


def test_calibration_prediction_is_the_memory_properties_tracker():
    """The prediction side runs on fake CPU tensors, here as on a GPU machine."""
    from bench.gpu_calibration import predict
    from harness.memory.logits import measure_token_memory
    from harness.targets import load_target

    case = MemoryCase(rows=96, vocab_local=40, chunk_size=16)
    target = load_target("impl")
    assert predict(case, target) == measure_token_memory(case, target, fake=False).peak


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_bench_oracle_check_applies_the_tolerance_policy(dtype):
    """The GPU bench's correctness gate, run on CPU tensors: passes impl/, fails a wrong gradient."""
    from bench.gpu_bench import check_against_oracle
    from bench.implementations import fused_reference_chunk

    generator = torch.Generator().manual_seed(0)
    base = (torch.randn(64, 1000, generator=generator) * 3).to(dtype)
    targets = torch.randint(0, 1000, (64,), generator=generator)
    assert check_against_oracle(fused_reference_chunk, base, targets)["ok"]

    def entropy_ten_percent_off(logits, targets):
        log_probs, entropy = fused_reference_chunk(logits, targets)
        return log_probs, entropy * 1.1

    assert not check_against_oracle(entropy_ten_percent_off, base, targets)["ok"]


def test_gpu_hidden_without_torchs_chunked_op_measures_the_rest_and_fails(tmp_path, monkeypatch):
    """A torch without the chunked ``linear_cross_entropy`` (older than the one pinned here): impl is still timed
    against the unfused path, the torch paths are listed with the reason, and the run says it fell short."""
    from bench import gpu_hidden

    monkeypatch.setattr(gpu_hidden, "TINY", {"tiny": (8, 4, 16)})
    monkeypatch.delattr(torch.nn, "LinearCrossEntropyOptions")
    assert gpu_hidden.main(["--cpu", "--out", str(tmp_path)]) == 1
    table = json.loads((tmp_path / "hidden.json").read_text())
    assert set(table["left_out"]) == {"torch-chunked", "torch-reference"}
    assert "no chunked linear_cross_entropy" in table["left_out"]["torch-chunked"]
    assert set(table["shapes"]["tiny"]) == {"impl", "impl+entropy", "unfused"}
    assert "tiny" in table["impl_vs_unfused"] and "impl_vs_torch_chunked" not in table


def test_gpu_tune_swaps_the_launch_choices_for_its_run_only():
    """bench.gpu_tune times other tiles and warp counts; afterwards the kernels' own choices are back."""
    from bench.gpu_tune import chosen
    from impl.triton import kernels

    own = kernels.block_columns, kernels.warps
    with chosen(kernels, 512, 2):
        assert kernels.block_columns(151_936, kernels.FORWARD_TILE) == 512
        assert kernels.warps(512, True) == 2
    assert (kernels.block_columns, kernels.warps) == own
