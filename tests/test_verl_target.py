"""Self-tests of the verl record (harness/targets/verl/family.py) on stand-in trees: no network, no verl.

The stand-ins under tests/fakes/verl/ follow the signatures of the verl
definitions the record calls, with plain torch arithmetic: the engine's
logits processor (a method whose class and module never run), the engine
forward with verl's thd helpers, the loss registry, the fused LM head. These
tests exercise the seams: what is declared and recorded, what is an ERROR,
the translation (the logits the engine owns, the rows the harness's model
returns across CP ranks), and that the composition that runs is the tree's:
a processor that leaves out its temperature division and an engine forward
that leaves out the label roll FAIL, and so does a ppo_loss without its entropy
term; a label roll per CP chunk FAILS under CP only; the chunked-entropy backward of verl 0.9.1 (a saved view written in
backward) crashes the backward check.
"""

import shutil
import sys

import pytest
import torch

from harness.cases.case import Case
from harness.cases.hidden import with_hidden_size
from harness.checks.forward_only import check_hidden_forward_only, check_packed_forward_only, check_token_forward_only
from harness.checks.hidden import check_hidden_backward, check_hidden_forward
from harness.checks.parity import check_packed_backward, check_packed_forward, check_token_backward, check_token_forward
from harness.checks.policy import check_policy_loss
from harness.checks.token_policy import check_token_policy_loss
from harness.gate import specs
from harness.targets import PackedInputs, load_target, registry
from harness.targets.upstream.loader import MissingUpstream
from harness.targets.verl.family import VERL
from tests.fakes.verl import targets as fakes

CORRECT = f"verl={fakes.HERE / 'correct'}"
VIEW_WRITING = f"verl={fakes.HERE / 'view_writing'}"
CHUNK_ROLLED = f"verl={fakes.HERE / 'chunk_rolled'}"
TOKEN_CASE = Case(seed=7, vocab=10, samples=((9, 4),), temperature=2.5, with_entropy=True)
POLICY_CASE = Case(seed=5, vocab=12, samples=((7, 4), (3, 0), (5, 4)), pad_multiple=3, mask_mode="mixed")
PACKED_CASES = [
    # tp 2 without CP: verl pads every sequence to a multiple of tp, the harness not at all
    Case(seed=4, vocab=16, tp=2, samples=((9, 5), (4, 3)), pad_multiple=3, temperature=0.7, with_entropy=True),
    # tp 2 x cp 2: verl's zigzag chunks are tp*cp*2-aligned, the harness's 2*cp-aligned (rows cross ranks)
    Case(seed=5, vocab=12, tp=2, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 3), (2, 1)), with_entropy=True),
    Case(seed=6, vocab=12, cp=2, cp_mode="allgather", samples=((9, 6), (3, 2)), pad_multiple=3, chunk_size=2),
]


def _edited(tmp_path, name: str, path: str, *changes: tuple[str, str]) -> str:
    """A copy of the correct tree with ``path``'s lines changed (each ``(old, new)``): the spec of that tree."""
    tree = tmp_path / name
    shutil.copytree(fakes.HERE / "correct", tree)
    _edit(tree / path, *changes)
    return f"verl={tree}"


def _edit(file, *changes: tuple[str, str]) -> None:
    """``file`` with each ``(old, new)`` made, every ``old`` there to change."""
    text = file.read_text()
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new)
    file.write_text(text)


# ---- the record: declared, recorded, missing ------------------------------------------------------


def test_declared_where_the_revision_has_it():
    target = fakes.correct()
    policy = {"token_policy_loss", "token_policy_entropy", "policy_dual_clip", "policy_agg_seq-mean-token-mean"}
    assert target.capabilities == {
        "token", "entropy", "chunking", "temperature", "packed", "cp_zigzag", "cp_allgather", "policy_loss",
        "hidden", "vocab_parallel",
    } | policy  # fmt: skip
    # a tree without the engine forward (models/mcore/model_forward.py): no packed level, no loss from logits
    view_writing = fakes.view_writing()
    assert not view_writing.capabilities & {"packed", "policy_loss", "cp_zigzag"}
    assert "engine forward" in view_writing.not_declared["packed_log_probs"]
    assert "#6848" in view_writing.not_declared["policy_loss"]
    assert not [name for name in sys.modules if name == "verl" or name.startswith("verl.")]
    assert "tensordict" not in sys.modules, "import-only placeholders must not outlive the load"
    assert "megatron.core.packed_seq_params" not in sys.modules, "the PackedSeqParams stand-in is for loading only"


def test_every_file_the_family_executed_is_recorded():
    """What a history keys verl's revisions by: the modules executed and the engine file the method came from;
    the engine module's own imports (Megatron's pipeline schedule, the engine base) never ran."""
    assert set(fakes.correct().executed) == {
        "verl/utils/megatron/tensor_parallel.py",
        "verl/models/mcore/util.py",
        "verl/models/mcore/model_forward.py",
        "verl/utils/torch_functional.py",
        "verl/trainer/ppo/core_algos.py",
        "verl/workers/utils/losses.py",
        "verl/utils/experimental/torch_functional.py",
        "verl/workers/engine/megatron/transformer_impl.py",
    }


def test_a_missing_path_is_an_error_naming_it(tmp_path):
    tree = tmp_path / "no-fused"
    shutil.copytree(fakes.HERE / "correct", tree)
    (tree / "verl/utils/experimental/torch_functional.py").unlink()
    with pytest.raises(MissingUpstream, match=r"hidden_log_probs: FusedLinearForPPO in verl/utils/experimental/"):
        VERL.target(tree)


def test_the_engine_method_missing_from_its_file_is_not_declared_with_the_reason(tmp_path):
    spec = _edited(
        tmp_path, "closure", "verl/workers/engine/megatron/transformer_impl.py", ("def _lm_head_logits", "def _renamed")
    )
    target = load_target(spec)
    assert "token" not in target.capabilities
    assert "a closure in forward_step" in target.not_declared["token_log_probs"]


# verl before #6848: the processor is a closure inside forward_step over its locals (written here, not copied)
CLOSURE_ENGINE = """
import torch
from verl.utils.megatron.tensor_parallel import vocab_parallel_entropy, vocab_parallel_log_probs_from_logits


class MegatronEngineWithLMHead:
    def forward_step(self, batch, model):
        calculate_entropy = batch["calculate_entropy"]

        def logits_processor(logits, label, temperature):
            temperature[temperature <= 0] = 1e-8
            logits.div_(temperature.unsqueeze(-1).to(logits.dtype))
            result, backup = {}, logits
            if calculate_entropy:
                backup = logits.clone()
                result["entropy"] = vocab_parallel_entropy(logits)
            result["log_probs"] = vocab_parallel_log_probs_from_logits(backup, label)
            return result

        return model(logits_processor)
"""


def test_an_older_revisions_closure_serves_the_token_and_packed_levels(tmp_path):
    """The older form of the processor is an alternative in the record, so a history reaches it: the closure runs
    with forward_step's locals bound by name, and one the record does not map is a load ERROR naming it."""
    tree = tmp_path / "closure"
    shutil.copytree(fakes.HERE / "correct", tree)
    engine = tree / "verl/workers/engine/megatron/transformer_impl.py"
    engine.write_text(CLOSURE_ENGINE)
    spec = f"verl={tree}"
    assert {"token", "packed", "temperature", "policy_loss"} <= load_target(spec).capabilities
    check_token_forward(TOKEN_CASE, spec)
    check_packed_forward(PACKED_CASES[0], spec)
    local = 'calculate_entropy = batch["calculate_entropy"]'
    engine.write_text(
        CLOSURE_ENGINE.replace(local, f'{local}\n        model_dtype = batch["dtype"]').replace(
            "if calculate_entropy:", "if calculate_entropy and model_dtype:"
        )
    )
    with pytest.raises(MissingUpstream, match=r"reads \['model_dtype'\]"):
        VERL.target(tree)


# Older closures (verl 2025-08..2026-01; their files annotate with the DataProto verl's __init__ re-exports), each
# with one of its forms: a temperature that is forward_step's local
# (and a warning through transformers' Logger.warning_once after torch.distributed.get_rank(), which a trainer
# process answers), a label_mask parameter (engine_impl.py, before #3600), a label the closure rolls itself
# (#3600 to #4250, where forward_step's label is its input_ids).
OLDER_CLOSURE = """
import logging
import torch
from verl import DataProto
from verl.utils.megatron.tensor_parallel import vocab_parallel_entropy, vocab_parallel_log_probs_from_logits

logger = logging.getLogger(__file__)


class MegatronEngineWithLMHead:
    def forward_step(self, batch: DataProto, model):
        calculate_entropy = batch["calculate_entropy"]
        temperature = batch["temperature"]

        def logits_processor(logits, label):
            logits.div_(temperature)
            result, backup = {}, logits
            if calculate_entropy:
                backup = logits.clone()
                if torch.distributed.get_rank() == 0:
                    logger.warning_once("the clone costs memory")
                result["entropy"] = vocab_parallel_entropy(logits)
            result["log_probs"] = vocab_parallel_log_probs_from_logits(backup, label)
            return result

        return model(logits_processor)
"""
OLDER_FORMS = {
    "temperature local": ("transformer_impl.py", OLDER_CLOSURE),
    "label_mask": (
        "engine_impl.py",
        OLDER_CLOSURE.replace("(logits, label):", "(logits, label, label_mask):").replace(
            'result["log_probs"] = vocab_parallel_log_probs_from_logits(backup, label)',
            'result["log_probs"] = vocab_parallel_log_probs_from_logits(backup, label).masked_fill(~label_mask, 0.0)',
        ),
    ),
    "rolled label": (
        "transformer_impl.py",
        OLDER_CLOSURE.replace(
            'result["log_probs"] =', 'label = torch.roll(label, shifts=-1, dims=1)\n            result["log_probs"] ='
        ),
    ),
}


@pytest.mark.parametrize("form", sorted(OLDER_FORMS))
def test_older_closures_serve_the_token_level_with_their_temperature(tmp_path, form):
    """Each older closure is translated (its temperature bound, an all-True label_mask, the input ids it rolls),
    never rewritten: one that reads its temperature but divides by 1 FAILS."""
    file, text = OLDER_FORMS[form]

    def tree(name: str, engine: str) -> str:
        shutil.copytree(fakes.HERE / "correct", tmp_path / name)
        engines = tmp_path / name / "verl/workers/engine/megatron"
        (engines / "transformer_impl.py").unlink()
        (engines / file).write_text(engine)
        return f"verl={tmp_path / name}"

    spec = tree("older", text)
    assert {"token", "temperature"} <= load_target(spec).capabilities
    check_token_forward(TOKEN_CASE, spec)
    check_token_backward(TOKEN_CASE.with_(dtype="float32"), spec)
    with pytest.raises(AssertionError):
        check_token_forward(TOKEN_CASE, tree("undivided", text.replace("div_(temperature)", "div_(temperature**0)")))


def test_the_tree_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(VERL.locate.variable, str(fakes.HERE / "correct"))
    assert VERL.target().root == (fakes.HERE / "correct").resolve()
    monkeypatch.setenv(VERL.locate.variable, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="verl/utils/megatron/tensor_parallel.py"):
        VERL.target()


def test_gate_and_history_know_the_family():
    resolved = specs.resolve("verl==0.9.1")
    assert resolved.family == "verl" and resolved.pip_requirement == "verl==0.9.1"
    assert resolved.env == {"LPH_VERL_PATH": str(specs.PACKAGES / "verl-0.9.1")}
    assert registry.family("verl") is VERL and VERL.expectations == ("verl.toml", "verl-hidden.toml")


# ---- token level: verl's processor ---------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_token_level_matches_the_oracle(chunk_size):
    case = TOKEN_CASE.with_(chunk_size=chunk_size)
    check_token_forward(case, CORRECT)
    check_token_backward(case, CORRECT)
    check_token_forward_only(case, CORRECT)


def test_the_processor_divides_the_tensor_it_is_handed_in_place():
    """verl divides the model output in place, and the adapter no longer hides that behind a clone of its own: the
    write reaches the tensor handed (a copy, as every job hands it), which the inputs-unmutated check reports."""
    leaf = torch.randn(5, 7, dtype=torch.bfloat16, requires_grad=True)
    handed = leaf.clone()
    before = leaf.detach().clone()
    target = fakes.correct()
    options = dict(tp_group=None, chunk_size=None, with_entropy=False, entropy_grad=False, temperature=0.7)
    log_probs, _ = target.token_log_probs(handed, torch.arange(5), **options)
    # verl divides by the temperature cast to the logits' dtype: a bf16 run divides by 0.69921875
    divided = before / torch.tensor(0.7).to(torch.bfloat16)
    assert torch.equal(handed.detach(), divided) and torch.equal(leaf.detach(), before)
    want = torch.log_softmax(divided.float(), -1)[torch.arange(5), torch.arange(5)]
    assert torch.allclose(log_probs, want, atol=1e-6)


def test_a_processor_that_leaves_out_its_temperature_step_fails(tmp_path):
    """The composition that runs is the tree's: its processor takes a temperature and never divides by it."""
    spec = _edited(
        tmp_path, "undivided", "verl/workers/engine/megatron/transformer_impl.py", ("DIVIDE = True", "DIVIDE = False")
    )
    check_token_forward(TOKEN_CASE, CORRECT)
    assert "temperature" in load_target(spec).capabilities
    with pytest.raises(AssertionError):
        check_token_forward(TOKEN_CASE, spec)
    with pytest.raises(AssertionError):
        check_packed_forward(PACKED_CASES[0], spec)


def test_chunked_entropy_writing_its_saved_view_fails_the_backward():
    check_token_backward(TOKEN_CASE, VIEW_WRITING)  # one chunk: the write is undone before anything reads it
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        check_token_backward(TOKEN_CASE.with_(chunk_size=2), VIEW_WRITING)


# ---- packed level: verl's engine forward on the harness's rows ------------------------------------------


@pytest.mark.parametrize("case", PACKED_CASES, ids=lambda c: f"tp{c.tp}-cp{c.cp}-{c.cp_mode}")
def test_packed_level_runs_verls_engine_forward_on_the_harness_rows(case):
    check_packed_forward(case, CORRECT)
    check_packed_backward(case, CORRECT)


def test_packed_forward_only():
    check_packed_forward_only(PACKED_CASES[1], CORRECT)


def test_an_engine_forward_that_leaves_out_the_label_roll_fails(tmp_path):
    """verl decides the roll (``need_roll``) in its engine forward; a tree whose forward leaves it out FAILS."""
    spec = _edited(
        tmp_path, "unrolled", "verl/models/mcore/model_forward.py", ("ROLL_LABEL = True", "ROLL_LABEL = False")
    )
    case = PACKED_CASES[0].with_(tp=1)
    check_packed_forward(case, CORRECT)
    with pytest.raises(AssertionError):
        check_packed_forward(case, spec)


def test_label_roll_per_cp_chunk_fails_the_packed_check():
    case = PACKED_CASES[1].with_(tp=1)
    check_packed_forward(case.with_(cp=1, cp_mode="none"), CHUNK_ROLLED)  # one rank: the chunk is the sequence
    with pytest.raises(AssertionError):
        check_packed_forward(case, CHUNK_ROLLED)


# ---- policy loss ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("coef", [0.0, -0.5])
def test_policy_loss_through_verls_registry(coef):
    check_policy_loss(POLICY_CASE.with_(entropy_coef=coef, with_entropy=True), CORRECT)
    check_policy_loss(POLICY_CASE.with_(with_entropy=False), CORRECT)


def test_a_loss_that_leaves_out_its_entropy_term_fails(tmp_path):
    """The policy loss that runs is verl's ppo_loss: a tree whose ppo_loss drops the entropy term FAILS."""
    spec = _edited(
        tmp_path, "no-entropy-term", "verl/workers/utils/losses.py", ("ENTROPY_TERM = True", "ENTROPY_TERM = False")
    )
    case = POLICY_CASE.with_(entropy_coef=-0.5, with_entropy=True)
    check_policy_loss(case, CORRECT)
    with pytest.raises(AssertionError):
        check_policy_loss(case, spec)


LOSSES = "verl/workers/utils/losses.py"
OLDER_PPO_LOSS = (  # ppo_loss before #3600 (2025-10-13): the [B, R] matrices as given, no padding helper
    ("def no_padding_2_padding(", "def _unused_padding("),
    ('log_prob = no_padding_2_padding(model_output["log_probs"], data)', 'log_prob = model_output["log_probs"]'),
    ("agg_loss(no_padding_2_padding(entropy, data), mask", "agg_loss(entropy, mask"),
)


def test_token_policy_loss_hands_each_form_of_ppo_loss_its_own_layout(tmp_path):
    """From verl #3600 ppo_loss pads the engine's per-position output to ``[B, R]`` itself (no_padding_2_padding);
    before, it took the ``[B, R]`` matrices as given. Each form gets its layout and passes; the older form handed
    the newer layout (what the record did before it told them apart) fails."""
    case = POLICY_CASE.with_(entropy_coef=-0.5, with_entropy=True)
    check_token_policy_loss(case, CORRECT)
    check_token_policy_loss(case, _edited(tmp_path, "older-ppo-loss", LOSSES, *OLDER_PPO_LOSS))
    # the older loss with the newer form's helper kept: the record hands it the newer layout
    misread = _edited(tmp_path, "older-ppo-loss-misread", LOSSES, *OLDER_PPO_LOSS[1:])
    with pytest.raises(RuntimeError, match="must match the existing size"):
        check_token_policy_loss(case, misread)


def test_policy_loss_under_cp_reads_verls_whole_batch_loss_as_each_ranks_share():
    check_policy_loss(PACKED_CASES[1].with_(tp=1, mask_mode="mixed", entropy_coef=0.1), CORRECT)


def test_cp_mode_without_a_cp_group_is_refused_clearly():
    inputs = PackedInputs([torch.tensor([1, 2, 3])], [3], [2], [torch.ones(2)], "thd", 1, cp_mode="zigzag")
    with pytest.raises(ValueError, match="cp_group"):
        fakes.correct().packed_log_probs(
            torch.zeros(3, 4),
            inputs,
            tp_group=None,
            cp_group=None,
            chunk_size=None,
            with_entropy=False,
            entropy_grad=False,
            temperature=1.0,
            response_only=False,
            loss_mask_only=False,
        )


# ---- hidden states: verl's fused LM head ------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_fused_torch_path_matches_the_oracle(chunk_size):
    case = with_hidden_size(Case(seed=3, vocab=11, samples=((8, 7),), chunk_size=chunk_size, temperature=0.7), 5)
    check_hidden_forward(case, CORRECT)
    check_hidden_backward(case, CORRECT)
    check_hidden_forward_only(case, CORRECT)


def test_the_hidden_path_is_judged_by_its_own_options():
    target = fakes.correct()
    assert target.capabilities_for({"hidden"}) == target.capabilities
    assert "hidden_tp" in target.not_declared


_HELPER = "verl/trainer/ppo/rollout_corr_helper.py"
_TRUNCATION_ONLY = """import torch


def compute_rollout_correction_weights(log_ratio, response_mask, rollout_is="token", rollout_is_threshold=2.0):
    if rollout_is_threshold <= 0:
        raise ValueError("rollout_is_threshold must be positive")
    weights = torch.exp(log_ratio).clamp(max=rollout_is_threshold) * response_mask
    return weights, {}
"""


def test_icepop_is_declared_only_where_the_rollout_helper_takes_its_lower_upper_threshold(tmp_path):
    """verl's first rollout helper (#3984) truncates at a float; IcePop's "lower_upper" string came with #5722.

    Declared by the helper's presence, the harness's MIS ran on the first form and read verl's TypeError as a FAIL.
    """
    tree = tmp_path / "truncation-only"
    shutil.copytree(fakes.HERE / "correct", tree)
    (tree / _HELPER).write_text(_TRUNCATION_ONLY)
    caps = load_target(f"verl={tree}").capabilities
    assert {"policy_tis_token", "policy_tis_sequence"} <= caps
    assert not caps & {"policy_mis_token", "policy_mis_sequence", "policy_mis_floor"}
    icepop = tmp_path / "icepop"  # a tree of its own: a loaded tree is not loaded again
    shutil.copytree(tree, icepop)
    _edit(
        icepop / _HELPER,
        ("    if rollout_is_threshold <= 0:", "    if isinstance(rollout_is_threshold, str):\n"
         "        low, rollout_is_threshold = map(float, rollout_is_threshold.split('_'))\n"
         "    if rollout_is_threshold <= 0:"),
    )  # fmt: skip
    assert {"policy_mis_token", "policy_mis_sequence", "policy_mis_floor"} <= load_target(f"verl={icepop}").capabilities
