"""ms-swift's composition before #9580 (2026-06-23), on ``tests/fakes/ms_swift`` with ``ms_swift_columns`` laid over.

From #7945 (2026-02-16) until #9580 the GRPO trainer's batch carries the rollout's columns as its own keys, hands
the loss its log-probs in the batch, and (until #9471) gathers CP ranks with the RLHF mixin's
``_postprocess_packed_tensor_cp``; until #8427 it asks the model for its own loss unless it computes the entropy.
The record maps that layout (``harness/targets/ms_swift/family.py``) and refuses the compositions before it by
name. What runs is the stand-in's ``forward_step``: a composition that leaves out a step fails.
"""

import pytest

from harness.cases.case import Case
from harness.checks.parity import check_packed_backward, check_packed_forward, check_token_backward, check_token_forward
from harness.ranks.errors import RankError
from harness.targets import load_target
from harness.targets.upstream.loader import MissingUpstream
from tests.fakes.reach_targets import MsSwift, ms_swift_copy

TRAINER = "swift/megatron/trainers/grpo_trainer.py"
MIXIN = "swift/megatron/trainers/rlhf_mixin.py"
TOKEN = [
    Case(seed=1, vocab=12, samples=((6, 4),), temperature=0.8, with_entropy=True),
    Case(seed=2, vocab=16, tp=2, samples=((5, 3),), temperature=0.8),  # no entropy asked: the logits branch runs
]
PACKED = Case(seed=4, vocab=12, cp=2, cp_mode="zigzag", samples=((9, 6), (5, 0), (6, 2)), with_entropy=True)


def _columns(tmp_path, *edits, moved=()):
    """The stand-in tree in its older layout (``edits``: (path, old, new) replacements, ``moved``: (path, to)), and a
    spec."""
    return ms_swift_copy(
        tmp_path,
        layers=["ms_swift_columns"],
        removed=["swift/megatron/trainers/utils.py"],  # reconstruct_tensor_cp came with #9471
        moved=moved,
        edits=edits,
    )


def _trainer(old, new):
    return (TRAINER, old, new)


# Before #7945 (2026-02-16) the trainer's methods and the mixin's gather read their arguments through Megatron-LM's
# get_args, a module-level name each file imports
GET_ARGS = (
    _trainer(
        "from functools import partial", "from functools import partial\n\nfrom megatron.training import get_args"
    ),
    _trainer('data.get("packed_seq_params"), self.args', 'data.get("packed_seq_params"), get_args()'),
    (MIXIN, "import torch\n", "import torch\nfrom megatron.training import get_args\n"),
    (MIXIN, "cp = self.args.context_parallel_size", "cp = get_args().context_parallel_size"),
)


def test_declares_the_same_capabilities_and_keys_the_mixin(tmp_path):
    root, spec = _columns(tmp_path)
    target = load_target(spec)
    assert {"token", "entropy", "temperature", "packed", "cp_zigzag"} <= target.capabilities
    assert "swift/megatron/trainers/rlhf_mixin.py" in target.executed
    assert target.up.columns and target.up.entropy_always


@pytest.mark.parametrize("case", TOKEN, ids=["entropy", "tp2-no-entropy"])
def test_token_parity_in_the_older_layout(tmp_path, case):
    _root, spec = _columns(tmp_path)
    check_token_forward(case, spec)
    check_token_backward(case, spec)


def test_packed_zigzag_cp_through_the_mixins_gather(tmp_path):
    _root, spec = _columns(tmp_path)
    check_packed_forward(PACKED, spec)
    check_packed_backward(PACKED, spec)


def test_a_loss_taking_one_advantage_per_sequence_is_not_declared(tmp_path):
    """Until #9641 (2026-06-29) the loss widened [B] advantages over the tokens: handed the protocol's per-token
    [B, R] it broadcasts them to [B, B, R] and fails for the record's reason, not the library's. Not declared, with
    that reason; the same loss on per-token advantages is."""
    root, spec = _columns(tmp_path)
    target = load_target(spec)
    assert "token_policy_loss" not in target.capabilities
    assert "one advantage per sequence" in target.not_declared["token_policy_loss"]
    per_token = ("advantages = advantages.unsqueeze(1)", "pass  # per token, [B, T], as since #9641")
    _root, spec = _columns(tmp_path / "per_token", _trainer(*per_token))
    assert "token_policy_loss" in load_target(spec).capabilities


def test_a_forward_step_without_the_temperature_fails(tmp_path):
    """ms-swift's Megatron GRPO trainer did not divide by the temperature until #8427 (2026-03-26)."""
    _root, spec = _columns(tmp_path, _trainer("output.div_(self.temperature)", "pass"))
    with pytest.raises(AssertionError):
        check_token_forward(TOKEN[0], spec)


def test_a_cp_gather_left_out_fails(tmp_path):
    """Gathering the sequences whole is forward_step's step (the mixin's method, bound to the stand-in trainer): one
    that skips it meets a rank's rows where its batch step wants whole sequences."""
    _root, spec = _columns(tmp_path, _trainer("if args.context_parallel_size > 1:", "if False:"))
    with pytest.raises(RankError, match="must match the existing size"):
        check_packed_forward(PACKED, spec)


def test_the_model_is_never_asked_for_its_own_loss(tmp_path):
    """Labels reaching the model stand-in (Megatron's GPTModel computing its loss) are refused, not answered with
    logits the trainer would read as a loss."""
    edit = _trainer('model(**{k: v for k, v in inputs.items() if k != "labels"})', "model(**inputs)")
    _root, spec = _columns(tmp_path, edit)
    with pytest.raises(MissingUpstream, match="its own loss"):
        check_token_forward(TOKEN[0], spec)


def test_arguments_read_through_megatron_lms_get_args_are_the_running_trainers(tmp_path):
    """2025-12..2026-02 the trainer and the mixin's gather read their arguments through Megatron-LM's get_args: the
    record answers with the stand-in trainer's while its method runs, so packed CP takes the gather (cp from them)."""
    _root, spec = _columns(tmp_path, *GET_ARGS)
    check_token_forward(TOKEN[0], spec)
    check_packed_forward(PACKED, spec)
    check_packed_backward(PACKED, spec)


def test_get_args_outside_a_trainer_method_is_refused_by_name(tmp_path):
    root, _spec = _columns(tmp_path, *GET_ARGS)
    with pytest.raises(MissingUpstream, match=r"get_args\(\) was called outside a trainer method"):
        MsSwift(root).up.get_args()


def test_the_log_probs_helper_is_found_in_its_file_before_the_v4_reorganisation(tmp_path):
    """Until #7238 (2026-01-14) pad_logps_back_to_batch lived in swift/trainers/rlhf_trainer/utils.py."""
    moved = [("swift/rlhf_trainers/utils.py", "swift/trainers/rlhf_trainer/utils.py")]
    edit = _trainer("from swift.rlhf_trainers.utils", "from swift.trainers.rlhf_trainer.utils")
    root, spec = _columns(tmp_path, edit, moved=moved)
    assert MsSwift(root).up.read_from["pad_logps_back_to_batch"] == moved[0][1]
    check_packed_forward(PACKED, spec)


def test_a_forward_step_handing_the_loss_the_models_own_loss_is_an_error_naming_it(tmp_path):
    """#7218 to #7263 (2025-12): forward_step read the columns but only the loss turned the model's own loss into
    log-probs (self.get_logps): no log-probs leave forward_step, which the record maps."""
    old = "logps, entropy = compute_logps_and_entropy_from_logits(output, labels, compute_entropy=True)"
    root, _spec = _columns(tmp_path, _trainer(old, "logps, entropy = self.get_logps(output, labels), None"))
    with pytest.raises(MissingUpstream, match="never computes log-probs from the logits"):
        MsSwift(root)


def test_a_batch_taken_from_get_batch_is_an_error_naming_the_composition(tmp_path):
    """Before #7218 (2025-12-29) forward_step took its batch from self.get_batch and the loss read the model's own
    loss: neither layout the record maps."""
    old = 'advantages, truncated = data.pop("advantages"), data.pop("truncated_mask")'
    root, _spec = _columns(
        tmp_path, _trainer(old, "advantages = truncated = None\n        data = self.get_batch(data)")
    )
    with pytest.raises(MissingUpstream, match="neither the batch's grpo_batch nor the rollout's columns"):
        MsSwift(root)


def test_a_column_the_record_does_not_hand_is_an_error_naming_it(tmp_path):
    old = 'lengths = data.pop("seq_lengths")'
    root, _spec = _columns(tmp_path, _trainer(old, f'{old}\n        data.pop("routed_experts_mask")'))
    with pytest.raises(MissingUpstream, match=r"reads the batch's \['routed_experts_mask'\]"):
        MsSwift(root)
