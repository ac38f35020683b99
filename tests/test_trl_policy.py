"""The TRL record's GRPO loss, offline on the stand-in tree ``tests/fakes/trl`` (no TRL, no transformers).

The stand-in's trainer derives from an absent ``transformers.Trainer`` and its
module imports the absent package's names: the record must load the method
alone, answer the model call with the harness's log-probs, declare the options
whose ``GRPOConfig`` fields are present (never read from the method's text),
pass the token-level checks on them, and a KL term that lost its gradient must
fail the term-gradient check.
"""

import shutil

import pytest

from harness.cases import policy
from harness.cases.case import Case
from harness.checks.token_policy import check_token_kl_term_gradient, check_token_policy_loss
from harness.targets import load_target
from tests.fakes.reach_targets import HERE

ROOT = HERE / "trl"
CASE = Case(seed=31, vocab=12, samples=((7, 4), (3, 0), (6, 5)), mask_mode="mixed")
SPEC = f"trl={ROOT}"
OPTIONS = {
    "policy_agg_seq-mean-token-mean",
    "policy_agg_token-mean",
    "policy_agg_seq-mean-token-sum-norm",
    "policy_kl_k3",
    "policy_kl_ratio_weighted",
    "policy_dual_clip",
}


def test_declares_the_options_whose_settings_grpo_config_has(tmp_path):
    assert {"token_policy_loss", *OPTIONS} <= load_target(SPEC).capabilities
    root = tmp_path / "trl"
    shutil.copytree(ROOT, root)
    config = root / "trl" / "trainer" / "grpo_config.py"
    text = config.read_text()
    assert "    use_bias_correction_kl: bool = False\n" in text
    config.write_text(text.replace("    use_bias_correction_kl: bool = False\n", ""))
    assert load_target(f"trl={root}").capabilities & OPTIONS == OPTIONS - {"policy_kl_ratio_weighted"}


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"dual_clip_c": policy.DUAL_CLIP_C, "aggregation": "token-mean"},
        {"kl_coef": 0.1, "kl_kind": "k3", "kl_ratio_weighted": True, "aggregation": "seq-mean-token-mean"},
        {"aggregation": "seq-mean-token-sum-norm", "horizon": 64.0},
    ],
)
def test_the_loss_passes_the_token_level_checks(options):
    case = policy.with_options(CASE, **options)
    check_token_policy_loss(case, SPEC)
    if options.get("kl_coef"):
        check_token_kl_term_gradient(case, SPEC)


def test_an_entropy_bonus_is_unsupported_its_aggregation_is_trls_own():
    with pytest.raises(pytest.skip.Exception, match="token_policy_entropy"):
        check_token_policy_loss(CASE.with_(entropy_coef=0.1), SPEC)


def test_a_detached_kl_fails_the_term_gradient(tmp_path):
    root = tmp_path / "trl"
    shutil.copytree(ROOT, root)
    trainer = root / "trl" / "trainer" / "grpo_trainer.py"
    text = trainer.read_text()
    assert 'd = inputs["ref_per_token_logps"] - logps\n' in text
    trainer.write_text(text.replace("- logps\n", "- logps.detach()\n", 1))
    case = policy.with_options(CASE, kl_coef=0.5, kl_kind="k3")
    with pytest.raises(AssertionError, match="grad"):
        check_token_kl_term_gradient(case, f"trl={root}")


TWO = "logps, entropies = self._get_per_token_logps_and_entropies("
ALONE = "logps = self._get_per_token_logps("
ASKED = "d = self._get_per_token_logps(self.ref_model, None, None, mask.size(1)) - logps\n"


@pytest.mark.parametrize(
    "model_call, reference",
    [(TWO, None), (ALONE, None), (ALONE, ASKED)],
    ids=["0.20-1.6", "0.19", "0.18"],
)
def test_the_model_call_answers_in_the_form_the_revision_unpacks(tmp_path, model_call, reference):
    """TRL 0.20-1.6 unpack two values from the model call (1.7 on: three), 0.18-0.19 call ``_get_per_token_logps``
    for the log-probs alone, 0.18 asks the reference model for the KL's reference inside the loss, and up to 0.27 the
    mask reads ``self.tools``: the stand-in trainer answers each revision in its own form, so the loss is checked
    there instead of raising in the adapter."""
    root = tmp_path / "trl"
    shutil.copytree(ROOT, root)
    trainer = root / "trl" / "trainer" / "grpo_trainer.py"
    text = trainer.read_text()
    three = "logps, entropies, _ = self._get_per_token_logps_and_entropies("
    first = 'mask = inputs["completion_mask"]\n'
    given = 'd = inputs["ref_per_token_logps"] - logps\n'
    assert three in text and first in text and given in text
    older = 'mask = inputs["completion_mask"] if not self.tools else inputs["completion_mask"] * inputs["tool_mask"]\n'
    trainer.write_text(text.replace(three, model_call).replace(first, older).replace(given, reference or given))
    case = policy.with_options(CASE, kl_coef=0.1, kl_kind="k3", aggregation="token-mean")
    check_token_policy_loss(case, f"trl={root}")
    check_token_kl_term_gradient(case, f"trl={root}")
