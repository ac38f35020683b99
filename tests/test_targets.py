"""Self-tests of the target seam: external adapters load by path, UNSUPPORTED is reported, failures replay."""

import inspect
import os
import subprocess
import sys
import textwrap

import pytest

from harness.cases.case import Case
from harness.checks.parity import check_packed_forward, check_token_forward
from harness.gate.verdicts import Run
from harness.mutants.runner import ROOT
from harness.targets import Unsupported, load_target

SKEWED_ADAPTER = textwrap.dedent('''
    from harness.targets.impl_target import ImplTarget

    class Skewed(ImplTarget):
        """impl with every log-prob shifted: a wrong implementation the checks must reject."""
        name = "skewed"

        def token_log_probs(self, logits, targets, **kwargs):
            log_probs, entropy = super().token_log_probs(logits, targets, **kwargs)
            return log_probs + 0.01, entropy

    class TokenOnly(ImplTarget):
        name = "token-only"
        capabilities = frozenset({"token", "entropy"})

    class NoTemperature(ImplTarget):
        name = "no-temperature"
        capabilities = ImplTarget.capabilities - {"temperature"}

    class SkewedNoTemperature(Skewed):
        capabilities = ImplTarget.capabilities - {"temperature"}

    class NoContextParallel(ImplTarget):
        name = "no-cp"
        capabilities = ImplTarget.capabilities - {"cp_zigzag", "cp_allgather"}
''')


@pytest.fixture
def adapter_file(tmp_path):
    path = tmp_path / "adapter.py"
    path.write_text(SKEWED_ADAPTER)
    return path


def test_path_adapter_loads_and_is_checked(adapter_file):
    target = f"{adapter_file}:Skewed"
    assert load_target(target).name == "skewed"
    with pytest.raises(AssertionError, match="log_probs") as info:
        check_token_forward(Case(seed=1, vocab=8, samples=((4, 2),)), target)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "Replay: python -m harness.replay harness.checks.parity:check_token_forward" in notes


def test_path_adapter_runs_on_tp_ranks(adapter_file):
    with pytest.raises(AssertionError, match="log_probs"):
        check_token_forward(Case(seed=2, vocab=8, tp=2, samples=((4, 2),)), f"{adapter_file}:Skewed")


def test_missing_capability_is_unsupported_not_pass(adapter_file):
    with pytest.raises(pytest.skip.Exception, match="UNSUPPORTED.*packed"):
        check_packed_forward(Case(seed=3, vocab=8, samples=((4, 2),)), f"{adapter_file}:TokenOnly")


def test_unsupported_outside_pytest_raises(adapter_file, monkeypatch):
    monkeypatch.delitem(sys.modules, "pytest")
    with pytest.raises(Unsupported):
        check_packed_forward(Case(seed=3, vocab=8, samples=((4, 2),)), f"{adapter_file}:TokenOnly")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_colon_here", "expected 'impl'"),
        ("missing_file.py:X", "no file"),
        ("harness.targets:NoSuchThing", "no attribute"),
    ],
)
def test_bad_target_specs_are_explained(spec, message):
    with pytest.raises((ValueError, FileNotFoundError, AttributeError), match=message):
        load_target(spec)


@pytest.mark.slow
def test_replay_command_reproduces_failure_and_pass(adapter_file):
    case = Case(seed=4, vocab=8, samples=((5, 3),))
    check = "harness.checks.parity:check_token_forward"
    command = [sys.executable, "-m", "harness.replay", check, "--case", case.to_json()]
    failing = subprocess.run([*command, "--target", f"{adapter_file}:Skewed"], cwd=ROOT, capture_output=True, text=True)
    assert failing.returncode == 1 and "FAIL" in failing.stdout, failing.stdout + failing.stderr
    passing = subprocess.run([*command, "--target", "impl"], cwd=ROOT, capture_output=True, text=True)
    assert passing.returncode == 0 and "PASS" in passing.stdout, passing.stdout + passing.stderr


def _verdicts(adapter_file, selection: str | list[str], adapter: str, report_dir=None) -> str:
    """Run properties in a fresh pytest (dev profile) against an adapter; their verdict table."""
    report = [f"--report-dir={report_dir}"] if report_dir else []
    selected = [selection] if isinstance(selection, str) else selection
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *selected, "--target", f"{adapter_file}:{adapter}", *report],
        cwd=ROOT,
        capture_output=True,
        text=True,
        # The verdict table is under test, not the diagnosis of a failure (tests/test_diagnosis.py).
        env={**os.environ, "HYPOTHESIS_PROFILE": "dev", "CI": "", "LPH_ABLATION": "0"},
    )
    return run.stdout[run.stdout.index("verdicts for target") :]


@pytest.mark.slow
def test_examples_needing_a_missing_capability_are_left_out_and_counted(adapter_file):
    table = _verdicts(adapter_file, "properties/test_forward_parity.py::test_token_forward_parity", "NoTemperature")
    assert "PASS          [contract] properties/test_forward_parity.py::test_token_forward_parity" in table, table
    assert "left out as UNSUPPORTED:" in table and "needing temperature" in table, table


@pytest.mark.slow
def test_left_out_examples_never_hide_a_failure(adapter_file):
    table = _verdicts(
        adapter_file, "properties/test_forward_parity.py::test_token_forward_parity", "SkewedNoTemperature"
    )
    assert "FAIL          [contract] properties/test_forward_parity.py::test_token_forward_parity" in table, table


@pytest.mark.slow
def test_property_whose_every_example_needs_a_missing_capability_is_unsupported(adapter_file, tmp_path):
    """What the check's code needs on every example (its entry point, a chunk check's ``chunking``) stops the
    property at its first example; a capability each draw needs (a CP layout, drawn) is found by rejecting every
    example (Hypothesis' Unsatisfiable). Both are UNSUPPORTED, naming what was missing."""
    packed = "properties/test_forward_parity.py::test_packed_forward_parity"
    chunked = "properties/test_invariances.py::test_token_chunk_invariance"
    table = _verdicts(adapter_file, [packed, chunked], "TokenOnly", report_dir=tmp_path / "token-only")
    assert "UNSUPPORTED   needs packed: 1 checks" in table and "needs chunking: 1 checks" in table, table
    verdicts = Run.load(tmp_path / "token-only").verdicts
    for check, missing in ((packed, ["packed"]), (chunked, ["chunking"])):
        verdict = verdicts[check]
        assert verdict.outcome == "UNSUPPORTED" and verdict.missing == missing, verdict
        assert f"does not support {missing} (every example of the check needs it" in verdict.reason, verdict
    split = "properties/test_policy_losses.py::test_policy_cp_invariance"
    _verdicts(adapter_file, split, "NoContextParallel", report_dir=tmp_path / "no-cp")
    (verdict,) = Run.load(tmp_path / "no-cp").verdicts.values()
    assert verdict.outcome == "UNSUPPORTED" and verdict.missing == ["cp_allgather", "cp_zigzag"], verdict
    assert "(all " in verdict.reason and "generated examples needed it" in verdict.reason, verdict


def test_a_replay_line_from_before_the_checks_package_still_resolves():
    """Reports written when the checks were one module name ``harness.checks:check_...``: they still replay."""
    from harness.checks import invariances, parity
    from harness.names import resolve

    assert resolve("harness.checks:check_token_forward") is parity.check_token_forward
    assert resolve("harness.checks:check_chunk_invariance") is invariances.check_chunk_invariance
    assert resolve("harness.checks.parity:check_token_forward") is parity.check_token_forward
    with pytest.raises(AttributeError, match="no attribute 'check_nothing'"):
        resolve("harness.checks:check_nothing")
    with pytest.raises(ValueError, match="module:attr"):
        resolve("harness.checks.parity")


# ---- the kernel: one grammar, one loader that records what it ran, placeholders as data ----------


def test_one_target_grammar_for_every_consumer(tmp_path):
    from harness.targets import registry
    from harness.targets.spec import parse

    assert parse("impl").kind == "impl" and parse("x.py:Y").kind == "adapter"
    release = parse("skyrl==0.3.0")
    assert (release.kind, release.family, release.where) == ("release", "skyrl", "0.3.0")
    assert release.directory.name == "skyrl-0.3.0"
    checkout = parse(f"slime={tmp_path}")
    assert checkout.text == f"slime={tmp_path.resolve()}" and checkout.directory == tmp_path.resolve()
    for bad, message in [
        ("slime==1.0", "not published on PyPI"),
        ("slime=/no/such", "not a directory"),
        ("x", "'impl'"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse(bad)
    assert {"slime", "miles", "skyrl", "verl", "nemo_rl"} <= set(registry.names())


def test_the_loader_runs_no_init_file_records_every_module_it_executed_and_leaves_nothing_behind(tmp_path):
    from harness.targets.upstream.loader import Loader, MissingUpstream
    from harness.targets.upstream.placeholders import Placeholder

    package = tmp_path / "lph_up" / "sub"
    package.mkdir(parents=True)
    (tmp_path / "lph_up" / "__init__.py").write_text("raise RuntimeError('a trainer __init__ must not run')\n")
    (package / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    (package / "main.py").write_text(
        "import lph_absent_dependency\nfrom lph_up.sub.helper import double\n\n\ndef four():\n    return double(2)\n"
    )
    loader = Loader(tmp_path, ("lph_up",), (Placeholder("lph_absent_dependency", "imported, never used"),))
    assert loader.module("lph_up.sub.missing", "lph_up.sub.main").four() == 4
    assert loader.executed == ("lph_up/sub/helper.py", "lph_up/sub/main.py")
    assert not [name for name in sys.modules if name.startswith(("lph_up", "lph_absent"))]
    with pytest.raises(MissingUpstream, match="lph_up/sub/gone.py"):
        loader.module("lph_up.sub.gone")
    # A definition loaded alone is recorded with the file as a part (what a history keys it by); a file also
    # executed whole is keyed whole.
    (package / "alone.py").write_text("import lph_absent_dependency\n\n\ndef one():\n    return 1\n")
    assert loader.symbol("lph_up/sub/alone.py", "one")() == 1
    assert loader.symbol_if_present("lph_up/sub/alone.py", "two") is None
    loader.symbol("lph_up/sub/helper.py", "double")
    assert "lph_up/sub/alone.py" in loader.executed
    assert loader.alone == {"lph_up/sub/alone.py": ("one", "two")}


def test_family_entry_points_are_generated_from_the_call_records_with_the_protocols_arguments():
    """FamilyTarget's entry points come from the call records (upstream/calls.py): each takes the arguments
    docs/targets.md documents (plus the token path's donate_logits / rows and the policy options), and a missing
    or unknown keyword is a TypeError naming it, raised before any upstream code runs."""
    from harness.targets.protocol import Target
    from harness.targets.upstream import calls
    from harness.targets.upstream.family import FamilyTarget

    def named(method, kind):
        return [name for name, p in inspect.signature(method).parameters.items() if p.kind is kind]

    positional, keyword, extras = (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
        {"donate_logits", "rows", "options"},
    )
    for record in calls.RECORDS:
        made, documented = getattr(FamilyTarget, record.serves), getattr(Target, record.serves)
        assert named(made, positional) == named(documented, positional), record.serves
        required = set(named(made, keyword)) - extras
        assert required == set(named(documented, keyword)), record.serves
        parameters = inspect.signature(made).parameters
        assert all(parameters[name].default is inspect.Parameter.empty for name in required), record.serves

    target = object.__new__(FamilyTarget)  # binding fails before anything of a family is needed
    target.name = "stand-in"
    options = dict(tp_group=None, chunk_size=None, with_entropy=False, temperature=1.0)
    with pytest.raises(TypeError, match=r"stand-in\.token_log_probs\(\): missing a required argument: 'entropy_grad'"):
        target.token_log_probs(None, None, **options)
    policy = dict(options, cp_group=None, response_only=False, loss_mask_only=False, advantages=[], old_log_probs=[])
    policy.update(eps_clip=0.2, eps_clip_high=None, entropy_coef=0.0)
    with pytest.raises(
        TypeError, match=r"stand-in\.policy_loss\(\): got an unexpected keyword argument 'entropy_grad'"
    ):
        target.policy_loss(None, None, entropy_grad=False, **policy)
