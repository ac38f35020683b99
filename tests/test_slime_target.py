"""Self-tests of the slime family record (harness/targets/slime/family.py) on stand-in checkouts: no network.

The stand-ins under tests/fakes/slime/ follow slime's function signatures with a
plain torch implementation (their README says which API each one has). They
exercise the seams: loading from a path, declaration by presence on the older
and newer APIs, the ``args`` Namespace, the mpu stand-in, UNSUPPORTED
declarations, an option present but not passed through (a FAIL, not
UNSUPPORTED), and the gate regression failing on the inverted gate and passing
on the right one.
"""

import shutil
import sys
import types

import pytest
import torch

from harness.cases import policy as policy_cases
from harness.cases.case import Case
from harness.checks.invariances import check_gate_invariance
from harness.checks.parity import (
    assert_entropy_gate,
    check_packed_backward,
    check_packed_forward,
    check_token_backward,
    check_token_forward,
)
from harness.checks.policy import check_policy_loss
from harness.jobs.logits import policy_job
from harness.ranks.run import run_job
from harness.targets import PackedInputs, load_target
from harness.targets.protocol import PolicyOptions
from harness.targets.slime import policy as slime_policy
from harness.targets.slime.family import SLIME
from harness.targets.upstream import megatron_cross_entropy, megatron_stand_in
from harness.targets.upstream.locate import find, revision
from harness.targets.upstream.placeholders import Placeholder, provided
from tests.fakes.slime import targets as stand_ins

PATH_VARIABLE = SLIME.locate.variable

FUSED = f"{stand_ins.__file__}:fused"
SPLIT_INVERTED = f"{stand_ins.__file__}:split_inverted"
GATELESS = f"{stand_ins.__file__}:gateless"

GATE_CASE = Case(seed=21, vocab=16, samples=((8, 6), (4, 2)), entropy_coef=0.01)
PACKED_CASE = Case(
    seed=5, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=3, mask_mode="mixed", temperature=0.7
)


def _slime_modules() -> list[str]:
    return [name for name in sys.modules if name == "slime" or name.startswith("slime.")]


# ---- loading from a path -----------------------------------------------------------------


def test_checkout_comes_from_the_environment_or_the_spec(monkeypatch):
    monkeypatch.setenv(PATH_VARIABLE, str(stand_ins.HERE / "fused"))
    target = SLIME.target()
    assert target.root == (stand_ins.HERE / "fused").resolve()
    assert target.name == "slime"  # no .git in the stand-in
    assert load_target(f"slime={stand_ins.HERE / 'fused'}").root == target.root


def test_missing_or_wrong_checkout_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv(PATH_VARIABLE, raising=False)
    with pytest.raises(ModuleNotFoundError, match=PATH_VARIABLE):
        find("slime", SLIME.locate)
    with pytest.raises(FileNotFoundError, match="ppo_utils.py"):
        find("slime", SLIME.locate, tmp_path)


def test_loading_leaves_no_slime_modules_behind():
    before = _slime_modules()
    targets = [stand_ins.fused(), stand_ins.split_inverted(), stand_ins.gateless()]
    assert _slime_modules() == before
    # Three checkouts in one process, each with its own code under the same module names.
    files = {t.up.get_log_probs_and_entropy.__code__.co_filename for t in targets}
    assert len(files) == 3


def test_absent_dependencies_are_placeholders_only_while_loading():
    name = "lph_never_installed_package"
    with provided([Placeholder(name, "a test")]):
        module = __import__(f"{name}.sub", fromlist=["x"])
        annotation = module.Client | None  # module-level annotations still evaluate
        assert annotation is not None
        with pytest.raises(ModuleNotFoundError, match="not installed"):
            module.Client()
    assert name not in sys.modules and f"{name}.sub" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        __import__(name)


def test_revision_is_read_from_git_metadata(tmp_path):
    sha = "0d3ada3a70534c4fd2ca1f99837c63469932f4c7"
    plain = tmp_path / "plain"
    (plain / ".git" / "refs" / "heads").mkdir(parents=True)
    (plain / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (plain / ".git" / "refs" / "heads" / "main").write_text(sha + "\n")
    assert revision(plain) == "0d3ada3a7"

    packed = tmp_path / "packed"
    (packed / ".git").mkdir(parents=True)
    (packed / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (packed / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{sha} refs/heads/main\n")
    assert revision(packed) == "0d3ada3a7"

    # A worktree: .git is a file naming its git dir, whose HEAD is detached.
    common = tmp_path / "bare"
    gitdir = common / "worktrees" / "wt"
    gitdir.mkdir(parents=True)
    (gitdir / "HEAD").write_text(sha + "\n")
    (gitdir / "commondir").write_text("../..\n")
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {gitdir}\n")
    assert revision(worktree) == "0d3ada3a7"
    assert revision(tmp_path) is None


# ---- feature detection and UNSUPPORTED --------------------------------------------------


def test_capabilities_follow_what_the_revision_defines():
    """Declared means present: a definition or a parameter of one, never a keyword in the source."""
    # Every stand-in's compute_policy_loss takes eps_clip_c and its get_sum_of_sample_mean calculate_per_token_loss.
    base = {"entropy", "packed", "policy_loss", "temperature", "policy_dual_clip", "policy_agg_token-sum"}
    base |= {"vocab_parallel"}  # its logits paths take the shard
    keep_mask = {"sampling", "sampling_dense", "sampling_force_keep"}
    assert load_target(FUSED).capabilities == base | {"token", "chunking", "entropy_gate"} | keep_mask
    # No gate parameter: every entropy keeps its graph.
    assert load_target(GATELESS).capabilities == base | {"token"}
    # The split API (#1185's one revision) has no token-level function: not declared, with the record's reason;
    # its gate is read from args.entropy_coef inside the packed path, which no definition declares.
    split = load_target(SPLIT_INVERTED)
    assert split.capabilities == base
    assert "get_log_probs_and_entropy" in split.not_declared["token_log_probs"]


def test_missing_capabilities_are_reported_unsupported():
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED.*entropy_gate"):
        check_gate_invariance(GATE_CASE, GATELESS)
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED.*bshd"):
        check_packed_forward(PACKED_CASE.with_(qkv_format="bshd"), FUSED)
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED.*cp_zigzag"):
        check_packed_forward(Case(vocab=4, cp=2, cp_mode="zigzag", samples=((6, 3),)), FUSED)


def test_an_unmappable_option_is_refused_loudly():
    target = load_target(FUSED)
    case = PACKED_CASE.with_(qkv_format="bshd")
    inputs = PackedInputs(case.tokens(), case.total_lengths, case.response_lengths, case.loss_masks(), "bshd", 3)
    with pytest.raises(ValueError, match="bshd"):
        target.packed_log_probs(
            case.rank_logits(0),
            inputs,
            tp_group=None,
            cp_group=None,
            chunk_size=None,
            with_entropy=True,
            entropy_grad=True,
            temperature=1.0,
            response_only=False,
            loss_mask_only=False,
        )


def test_chunk_size_runs_as_one_chunk_where_the_revision_cannot_chunk():
    target = load_target(GATELESS)
    logits, targets = torch.randn(5, 8), torch.randint(0, 8, (5,))
    options = dict(tp_group=None, with_entropy=True, entropy_grad=True, temperature=1.0)
    chunked, _ = target.token_log_probs(logits, targets, chunk_size=2, **options)
    whole, _ = target.token_log_probs(logits, targets, chunk_size=None, **options)
    assert torch.equal(chunked, whole)


# ---- values through each API against the oracle --------------------------------------------


@pytest.mark.parametrize("spec", [FUSED, GATELESS])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_token_level_matches_the_oracle(spec, dtype):
    case = Case(seed=7, vocab=10, samples=((9, 4),), temperature=2.5, dtype=dtype)
    check_token_forward(case, spec)
    check_token_backward(case, spec)
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED.*token"):
        check_token_forward(case, SPLIT_INVERTED)


@pytest.mark.parametrize("spec", [FUSED, GATELESS])
def test_packed_layout_maps_onto_slimes(spec):
    check_packed_forward(PACKED_CASE, spec)
    check_packed_backward(PACKED_CASE, spec)
    check_policy_loss(PACKED_CASE.with_(entropy_coef=-0.5), spec)


def test_megatron_fused_cross_entropy_stand_in():
    """Megatron's contract: per-token lse - z_t, gradient (softmax - onehot) * g, fp32 input overwritten."""
    megatron_stand_in.install()
    megatron_cross_entropy.install()
    from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy

    logits = torch.randn(6, 1, 7, dtype=torch.float64).float()
    target = torch.randint(0, 7, (6, 1))
    leaf = logits.clone().requires_grad_()
    scratch = leaf.clone()
    loss = fused_vocab_parallel_cross_entropy(scratch, target, megatron_stand_in.SINGLE_RANK)
    want = torch.nn.functional.cross_entropy(logits.squeeze(1), target.squeeze(1), reduction="none")
    torch.testing.assert_close(loss.squeeze(1), want)
    torch.testing.assert_close(scratch.detach(), torch.softmax(logits, dim=-1))
    weights = torch.randn(6, 1)
    (loss * weights).sum().backward()
    expected = torch.softmax(logits, -1) - torch.nn.functional.one_hot(target, 7).float()
    torch.testing.assert_close(leaf.grad, expected * weights.unsqueeze(-1))


# ---- the args Namespace and the mpu stand-in -------------------------------------------------


def _spy_policy(target, monkeypatch) -> dict:
    seen = {}
    original = target.up.policy_loss_function

    def spy(args, batch, logits, sum_of_sample_mean):
        parallel_state = sys.modules["megatron.core.parallel_state"]
        seen.update(args=args, batch=batch, logits_shape=tuple(logits.shape))
        seen["tp_group"] = parallel_state.get_tensor_model_parallel_group()
        seen["cp_size"] = parallel_state.get_context_parallel_world_size()
        return original(args, batch, logits, sum_of_sample_mean)

    monkeypatch.setattr(target.up, "policy_loss_function", spy)
    return seen


@pytest.mark.parametrize("with_entropy", [True, False])
def test_policy_loss_builds_slimes_args_and_batch(monkeypatch, with_entropy):
    target = stand_ins.fused()
    seen = _spy_policy(target, monkeypatch)
    case = PACKED_CASE.with_(with_entropy=with_entropy, chunk_size=4)
    logits = case.rank_logits(0).requires_grad_()
    advantages = [a.float() for a in case.advantages()]
    loss, log_probs, entropy = target.policy_loss(
        logits,
        PackedInputs(case.tokens(), case.total_lengths, case.response_lengths, case.loss_masks(), "thd", 3),
        advantages=advantages,
        old_log_probs=[a * 0 for a in advantages],
        eps_clip=0.2,
        eps_clip_high=0.28,
        entropy_coef=-0.5,
        with_entropy=with_entropy,
        tp_group=None,
        cp_group=None,
        chunk_size=4,
        temperature=0.7,
        response_only=False,
        loss_mask_only=False,
    )
    args = seen["args"]
    assert args.entropy_coef == (-0.5 if with_entropy else 0.0)
    assert (args.eps_clip, args.eps_clip_high, args.rollout_temperature) == (0.2, 0.28, 0.7)
    assert (args.log_probs_chunk_size, args.allgather_cp, args.qkv_format) == (4, False, "thd")
    with pytest.raises(AttributeError, match="args.not_a_setting"):
        _ = args.not_a_setting
    assert seen["batch"]["total_lengths"] == list(case.total_lengths)
    assert seen["logits_shape"] == (1, case.rows, case.vocab)
    assert seen["tp_group"] is megatron_stand_in.SINGLE_RANK and seen["cp_size"] == 1
    assert loss.dim() == 0 and [v.numel() for v in log_probs] == list(case.response_lengths)
    assert (entropy is not None) == with_entropy
    # The per-sample values returned are the ones slime's loss used: they carry its graph.
    assert all(v.requires_grad for v in log_probs)


# ---- the gate regression: fails on the inverted gate, passes on the right one -------------------


def test_gate_regression_passes_on_the_correct_gate():
    for coef in (0.0, 0.01, -0.5):
        check_policy_loss(GATE_CASE.with_(entropy_coef=coef), FUSED)
    check_gate_invariance(GATE_CASE, FUSED)


def test_gate_regression_fails_on_the_inverted_gate():
    with pytest.raises(AssertionError, match="grad"):
        check_policy_loss(GATE_CASE, SPLIT_INVERTED)
    with pytest.raises(AssertionError, match=r"entropy.requires_grad=False but the gate .* is True"):
        assert_entropy_gate(GATE_CASE, run_job(policy_job, GATE_CASE, SPLIT_INVERTED))
    with pytest.raises(AssertionError, match=r"entropy.requires_grad=True but the gate .* is False"):
        case = GATE_CASE.with_(entropy_coef=0.0)
        assert_entropy_gate(case, run_job(policy_job, case, SPLIT_INVERTED))
    with pytest.raises(AssertionError, match="entropy_grad=False returned entropy that requires grad"):
        check_gate_invariance(GATE_CASE, SPLIT_INVERTED)


# ---- an option present but not passed through ---------------------------------------------------

# Seed 14: a token with A < 0 and a ratio above the dual clip's c (where the cap bites).
DUAL_CLIP = policy_cases.with_options(
    Case(seed=14, vocab=16, samples=((9, 6), (5, 3)), mask_mode="mixed"), dual_clip_c=policy_cases.DUAL_CLIP_C
)


def test_an_option_present_but_not_passed_through_fails_instead_of_reading_unsupported(tmp_path):
    """The stand-in's compute_policy_loss takes eps_clip_c, its policy_loss_function never passes it (slime before
    #2247): the dual clip is declared and its check FAILS; passing it through makes the same check pass."""
    assert "policy_dual_clip" in load_target(FUSED).capabilities
    with pytest.raises(AssertionError):
        check_policy_loss(DUAL_CLIP, FUSED)
    tree = tmp_path / "wired"
    shutil.copytree(stand_ins.HERE / "fused", tree)
    loss = tree / "slime/backends/megatron_utils/loss.py"
    text = loss.read_text()
    assert "args.eps_clip, args.eps_clip_high)" in text
    loss.write_text(
        text.replace("args.eps_clip, args.eps_clip_high)", "args.eps_clip, args.eps_clip_high, args.eps_clip_c)")
    )
    check_policy_loss(DUAL_CLIP, f"slime={tree}")


def _approx_kl_before_483(log_probs, log_probs_base, kl_loss_type, importance_ratio=None):
    """compute_approx_kl's switch before slime #483 (2025-10-20): k1 under the name "kl", the others as now."""
    log_ratio = log_probs - log_probs_base
    if kl_loss_type == "kl":
        return log_ratio
    if kl_loss_type in ("k3", "low_var_kl"):
        return (-log_ratio).exp() - 1 + log_ratio
    raise ValueError(f"Unknown kl_loss_type: {kl_loss_type}")


def test_a_kl_estimator_is_declared_and_passed_under_the_name_the_revision_takes():
    """slime named k1 "kl" until #483: that revision declares k1 and is passed "kl" (a convention, translated),
    never the harness's "k1", which its switch refuses; a kind it takes under no name is not declared."""
    up = types.SimpleNamespace(compute_approx_kl=_approx_kl_before_483)
    kinds = {f"policy_kl_{kind}" for kind in slime_policy.KL_NAMES}
    declared = {o.capability for o in slime_policy.OPTIONS if o.capability in kinds and o.when[0](up)}
    assert declared == {"policy_kl_k1", "policy_kl_k3", "policy_kl_low_var_kl"}
    options = PolicyOptions(kl_kind="k1", kl_coef=0.1, ref_log_probs=[torch.zeros(2)])
    call = types.SimpleNamespace(eps_clip=0.2, clip_high=0.2, with_entropy=False, entropy_coef=0.0, options=options)
    args, _ = slime_policy.settings(up, call, [torch.ones(2)])
    assert args["kl_loss_type"] == "kl"
    current = types.SimpleNamespace(compute_approx_kl=lambda lp, base, kind, importance_ratio=None: lp - base)
    assert slime_policy.kl_name(current, "k1") == "k1"
    assert slime_policy.kl_name(types.SimpleNamespace(compute_approx_kl=None), "k1") is None


# ---- the composition that runs is slime's; a replay line names its checkout -----------------------


def test_a_composition_that_leaves_out_a_step_fails_and_its_replay_line_runs_when_pasted(tmp_path):
    """A stand-in whose get_log_probs_and_entropy leaves out its temperature division fails the packed check:
    the division is slime's step, never the adapter's. The failure's replay line, as the gate prints it in a
    pull request's comment, names the checkout and reproduces the failure when pasted into a shell."""
    import os
    import subprocess

    from harness import ROOT
    from harness.checks.failure import facts_of
    from harness.gate import specs

    tree = tmp_path / "no-temperature"
    shutil.copytree(stand_ins.HERE / "fused", tree)
    loss = tree / "slime/backends/megatron_utils/loss.py"
    step = "    if args.rollout_temperature != 1.0:\n        logits = logits / args.rollout_temperature\n"
    assert step in loss.read_text()
    loss.write_text(loss.read_text().replace(step, ""))
    case = PACKED_CASE.with_(temperature=0.5)
    check_packed_forward(case, FUSED)
    spec = specs.resolve(f"slime={tree}").run_as  # what the gate hands pytest's --target
    with pytest.raises(AssertionError) as failed:
        check_packed_forward(case, spec)
    replay = facts_of(failed.value).replay
    assert f"--target slime={tree}" in replay
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    pasted = subprocess.run(
        replay, shell=True, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PATH": path}
    )
    assert pasted.returncode == 1 and "FAIL" in pasted.stdout, pasted.stdout + pasted.stderr
