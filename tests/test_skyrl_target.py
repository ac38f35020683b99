"""The SkyRL adapter's seams, on stand-in packages written here (no network, no upstream checkout).

``tests/fakes/skyrl_fixed`` follows the upstream signatures with correct
arithmetic (a packed entry point with CP, a PPO loss and a wrapper whose entropy gate the adapter reads);
``skyrl_buggy`` carries docs/bugs.md #2 and #3, ``skyrl_inverted_gate`` docs/bugs.md #1. The adapter must load
both by path, answer the Megatron lookups, map shapes and shard bounds so the
fixed one passes the checks at one and two TP ranks, and let the regressions'
checks fail the buggy one.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.cases.case import Case
from harness.checks.ownership import check_shared_logits
from harness.checks.parity import check_packed_backward, check_packed_forward, check_token_backward, check_token_forward
from harness.checks.policy import check_policy_loss
from harness.memory.logits import MemoryCase, measure_token_memory
from harness.memory.tracker import int64_with_dimension
from harness.targets import load_target
from harness.targets.skyrl import wrapper
from harness.targets.skyrl.family import SKYRL
from harness.targets.upstream import megatron_stand_in

PATH_VARIABLE = SKYRL.locate.variable
STAND_INS = "tests/fakes/skyrl_targets.py"
HERE_FAKES = Path(__file__).parent / "fakes"
FIXED, BUGGY, INVERTED = f"{STAND_INS}:Fixed", f"{STAND_INS}:Buggy", f"{STAND_INS}:InvertedGate"
CASES = [
    Case(seed=1, vocab=12, samples=((6, 4), (5, 2)), chunk_size=3, with_entropy=True),
    Case(seed=2, vocab=16, tp=2, samples=((7, 5),), chunk_size=2, with_entropy=True),
]


def test_names_the_version_it_loaded():
    assert load_target(FIXED).name == "skyrl-0.0.0+stand-in-fixed"
    assert load_target(FIXED).capabilities == {
        "token", "entropy", "entropy_gate", "chunking", "temperature", "packed", "cp_zigzag", "policy_loss",
        "hidden", "hidden_tp", "vocab_parallel",
        # its apply_loss_reduction_to_advantages_minibatch is present (declared means present; the stand-in
        # implements sequence_mean only); its registry lists no other loss type, and it has no KL or correction
        "policy_agg_seq-mean-token-mean", "policy_agg_token-mean", "policy_agg_seq-mean-token-sum-norm",
    }  # fmt: skip


def test_packed_and_cp_are_declared_only_where_the_version_has_them():
    # The buggy stand-in, like SkyRL before its packed entry point, has token-level and fused Functions only.
    buggy = load_target(BUGGY)
    logits = {"token", "entropy", "entropy_gate", "chunking", "temperature", "vocab_parallel"}
    assert buggy.capabilities == logits | {"hidden", "hidden_tp"}
    assert "packed entry point" in buggy.not_declared["packed_log_probs"]


def test_cp_is_declared_where_skyrls_cp_backward_can_run(monkeypatch):
    # SkyRL's CP gather moves its backward's index to CUDA: the record declares CP on CUDA only (the stand-in specs
    # hold it on any device, their gather running on a CPU).
    monkeypatch.delenv("LPH_DEVICE", raising=False)
    on_cpu = SKYRL.target(HERE_FAKES / "skyrl_fixed")
    assert "cp_zigzag" not in on_cpu.capabilities and "packed" in on_cpu.capabilities
    assert ".cuda()" in on_cpu.not_declared["cp_zigzag"]
    monkeypatch.setenv("LPH_DEVICE", "cuda")
    assert "cp_zigzag" in SKYRL.target(HERE_FAKES / "skyrl_fixed").capabilities


def test_every_file_the_family_executed_or_read_is_recorded():
    """What a history keys SkyRL's revisions by: the modules executed and the wrapper read."""
    assert set(load_target(FIXED).executed) >= {
        "skyrl/backends/skyrl_train/distributed/megatron/model_utils.py",
        "skyrl/backends/skyrl_train/utils/ppo_utils.py",
        "skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py",
    }


PACKED_CASES = [
    Case(seed=3, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=4, with_entropy=True, chunk_size=3),
    Case(seed=4, vocab=16, tp=2, samples=((9, 5), (4, 3)), with_entropy=True),
    Case(seed=5, vocab=12, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 3), (2, 1)), pad_multiple=3, with_entropy=True),
]


@pytest.mark.parametrize("case", PACKED_CASES, ids=lambda c: f"tp{c.tp}-cp{c.cp}")
def test_fixed_stand_in_passes_packed_checks(case):
    check_packed_forward(case, FIXED)
    check_packed_backward(case, FIXED)


@pytest.mark.parametrize("chunk_size", [None, 2], ids=["whole", "chunked"])
def test_cp_padding_rows_get_no_gradient_from_the_adapter(chunk_size):
    # The control for SkyRL 0.3.0's "CP rank 0: padding rows received a gradient" (an empty sample at
    # CP=2 zigzag, -inf vocabulary columns): with an upstream whose entropy takes 0·log 0 as 0, the
    # adapter's mapping (cu_seqlens_padded, this rank's chunks, harness end padding cut off) leaves
    # every padding row at exactly 0. SkyRL's NaN there comes from its _VocabParallelEntropy.
    case = Case(seed=12, vocab=6, cp=2, cp_mode="zigzag", samples=((1, 0), (13, 1), (6, 3)), pad_multiple=4,
                chunk_size=chunk_size, special=("neg_inf_columns",), with_entropy=True, logit_scale=3.0)  # fmt: skip
    check_packed_backward(case, FIXED)
    check_packed_forward(case, FIXED)


POLICY_CASES = [
    Case(seed=6, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=4, with_entropy=True, entropy_coef=0.3,
         chunk_size=3),
    Case(seed=7, vocab=12, samples=((6, 5), (5, 2)), with_entropy=True, entropy_coef=0.0),
    Case(seed=8, vocab=12, samples=((6, 5),), with_entropy=False),
    Case(seed=9, vocab=16, tp=2, samples=((9, 5), (4, 3)), with_entropy=True, entropy_coef=0.1),
    Case(seed=10, vocab=12, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 3), (2, 1)), pad_multiple=3,
         with_entropy=True, entropy_coef=0.2),
]  # fmt: skip


@pytest.mark.parametrize("case", POLICY_CASES, ids=lambda c: f"tp{c.tp}-cp{c.cp}-coef{c.entropy_coef}")
def test_fixed_stand_in_passes_the_policy_loss_check(case):
    # Loss value and gradient against the oracle (sum_of_sample_mean, CP shares adding up), gate on and off.
    check_policy_loss(case, FIXED)


def test_policy_loss_is_declared_only_with_a_loss_module_and_a_readable_gate():
    # The buggy stand-in has no ppo_utils and no wrapper: no policy loss, rather than a guessed one.
    assert "policy_loss" not in load_target(BUGGY).capabilities
    assert "policy_loss" in load_target(INVERTED).capabilities


@pytest.mark.parametrize("coef", [0.3, 0.0], ids=["bonus", "no-bonus"])
def test_inverted_wrapper_gate_fails_the_gate_check(coef):
    # With a bonus the entropy comes back detached (the bonus does nothing); without one it keeps its graph.
    case = Case(seed=11, vocab=12, samples=((7, 4), (5, 3)), with_entropy=True, entropy_coef=coef)
    with pytest.raises(AssertionError, match=r"entropy.requires_grad=(False|True) but the gate"):
        check_policy_loss(case, INVERTED)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}")
def test_fixed_stand_in_passes_token_checks(case):
    check_token_forward(case, FIXED)
    check_token_backward(case, FIXED)
    check_token_backward(case.with_(chunk_size=None), FIXED)
    check_shared_logits(case, FIXED, backwards=2)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"tp{c.tp}")
def test_borrow_restore_stand_in_fails_the_shared_logits_check(case):
    # The entropy backward's sub_/add_ bumps the saved logits' version: the
    # chunked log-prob's backward refuses them (the error a rank raised).
    with pytest.raises(Exception, match="modified by an inplace operation"):
        check_shared_logits(case, BUGGY)


def test_one_hot_stand_in_is_caught_and_fixed_one_is_not():
    case = MemoryCase(rows=4096, vocab_local=5000, with_entropy=False)
    buggy = int64_with_dimension(measure_token_memory(case, load_target(BUGGY)).allocations, case.vocab_local)
    fixed = int64_with_dimension(measure_token_memory(case, load_target(FIXED)).allocations, case.vocab_local)
    assert buggy and not fixed
    assert {a.shape for a in buggy} >= {(1, 1024, 5000)}


def test_missing_checkout_is_a_clear_error(monkeypatch, tmp_path):
    """The error names every place a root was looked for, the older layout's included: a replay's ERROR row for a
    revision before SkyRL's Megatron code must not read as a wrong path."""
    monkeypatch.setenv(PATH_VARIABLE, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=PATH_VARIABLE) as raised:
        SKYRL.target()
    marker, older = SKYRL.locate.marker, SKYRL.locate.older
    assert older, "SkyRL's record names its older layout"
    for place in (marker, f"src/{marker}", *(f"{sub}/{file}" for sub, file in older)):
        assert place in str(raised.value), place


def test_temperature_is_the_wrappers_own_division_on_a_tensor_it_owns():
    """SkyRL's wrapper divides the logits by the temperature before its log-prob code: its statement runs (never
    ignored), on the model output it owns, so the harness's logits are not written."""
    target = load_target(FIXED)
    logits = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    before, targets = logits.clone(), torch.tensor([0, 4, 2])
    options = dict(tp_group=None, chunk_size=None, with_entropy=True, entropy_grad=False)
    scaled = target.token_log_probs(logits, targets, temperature=0.5, **options)
    assert torch.equal(logits, before), "the adapter wrote the caller's logits"
    divided = target.token_log_probs(logits / 0.5, targets, temperature=1.0, **options)
    plain = target.token_log_probs(logits, targets, temperature=1.0, **options)
    assert torch.equal(scaled[0], divided[0]) and torch.equal(scaled[1], divided[1])
    assert not torch.allclose(scaled[0], plain[0]), "the temperature was ignored"


def test_megatron_stand_in_single_rank_collectives_are_the_identity():
    state = megatron_stand_in.install()
    megatron_stand_in.set_groups(None, None)
    group = state.get_tensor_model_parallel_group()
    assert group is megatron_stand_in.SINGLE_RANK
    assert (state.get_tensor_model_parallel_world_size(), state.get_tensor_model_parallel_rank()) == (1, 0)
    # Megatron's get_pg_rank / get_pg_size ask the group itself once torch.distributed is initialised
    assert (group.size(), group.rank()) == (1, 0)
    x = torch.arange(3.0)
    torch.distributed.all_reduce(x, op=torch.distributed.ReduceOp.MAX, group=group)
    gathered = [torch.empty(3)]
    torch.distributed.all_gather(gathered, x, group=group)
    assert torch.equal(x, torch.arange(3.0)) and torch.equal(gathered[0], x)
    y = torch.ones(2, requires_grad=True)
    assert torch.distributed.nn.functional.all_reduce(y, group=group) is y


def test_entropy_gate_gives_a_graph_free_entropy():
    target = load_target(FIXED)
    logits = torch.randn(3, 5, requires_grad=True)
    targets = torch.tensor([0, 4, 2])
    options = dict(tp_group=None, chunk_size=None, with_entropy=True, temperature=1.0)
    _, off = target.token_log_probs(logits, targets, entropy_grad=False, **options)
    _, on = target.token_log_probs(logits, targets, entropy_grad=True, **options)
    assert off.grad_fn is None and on.requires_grad
    assert torch.equal(off, on.detach())


def test_a_wrapper_that_leaves_out_its_temperature_division_fails(tmp_path):
    """Its composition, not the adapter's, is what runs: a revision whose wrapper takes a temperature but never
    divides by it FAILS the temperature checks (the adapter used to divide by itself, so such a revision passed)."""
    import shutil

    tree = tmp_path / "skyrl"
    shutil.copytree(HERE_FAKES / "skyrl_fixed", tree, symlinks=True)
    path = tree / "skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py"
    division = "            if temperature != 1.0 and not fused_lm_head:\n                logits.div_(temperature)\n"
    assert division in path.read_text()
    path.write_text(path.read_text().replace(division, ""))
    case = Case(seed=1, vocab=12, samples=((6, 4), (5, 2)), temperature=0.5, with_entropy=True)
    check_token_forward(case, FIXED)
    check_packed_forward(case, FIXED)
    assert "temperature" in load_target(f"skyrl={tree}").capabilities
    for check in (check_token_forward, check_packed_forward):
        with pytest.raises(AssertionError):
            check(case, f"skyrl={tree}")


def test_a_checkout_in_skyrl_trains_layout_is_checked_there(tmp_path):
    """Until #1139 (2026-02-15) SkyRL's trainer was the skyrl-train package (skyrl-train/skyrl_train/, its config
    skyrl_train.config): the record's older layout finds it, executes its files, and its checks run on them."""
    import shutil

    package = tmp_path / "skyrl-train" / "skyrl_train"
    shutil.copytree(HERE_FAKES / "skyrl_fixed/skyrl/backends/skyrl_train", package)
    ppo_utils = package / "utils/ppo_utils.py"
    text = ppo_utils.read_text().replace("from skyrl.train.config", "from skyrl_train.config")
    ppo_utils.write_text(text.replace("from skyrl.backends.skyrl_train.", "from skyrl_train."))
    spec = f"skyrl={tmp_path}"
    target = load_target(spec)
    assert {"token", "packed", "policy_loss", "temperature"} <= target.capabilities
    assert "skyrl_train/utils/ppo_utils.py" in target.executed
    case = CASES[0].with_(temperature=0.5)
    for check in (check_token_forward, check_packed_forward, check_policy_loss):
        check(case, spec)


@pytest.mark.parametrize("use", [True, False], ids=["bonus", "no-bonus"])
def test_a_wrapper_reading_the_workers_config_is_read_alike(use):
    """From #622 (2025-11-17) to 2026-01-30 SkyRL's wrapper read its settings as ``self.cfg.trainer.algorithm``, not
    ``loss_config``: the same gate and term, on the adapter's settings."""
    text = (
        HERE_FAKES / "skyrl_fixed/skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py"
    ).read_text()
    older = text.replace("loss_config.", "self.cfg.trainer.algorithm.")
    assert older != text
    steps = wrapper.read(older)
    settings = SimpleNamespace(use_entropy_loss=use)
    assert steps.grad_enabled(settings) is use and steps.term_added(settings) is use
