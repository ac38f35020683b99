"""load_symbol: one function or class out of a module whose imports cannot run here (upstream/symbols.py)."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from harness.targets.upstream.symbols import MissingUpstreamImport, executed_digest, load_symbol

HEAVY = Path(__file__).parent / "fakes" / "heavy_module.py"


def test_the_whole_module_cannot_be_imported():
    spec = importlib.util.spec_from_file_location("heavy_module", HEAVY)
    with pytest.raises(ModuleNotFoundError):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_a_function_loads_with_what_it_needs_only():
    wanted = load_symbol(HEAVY, "wanted")
    assert wanted(8.0) == 4.0
    lines, first = inspect.getsourcelines(wanted)
    assert HEAVY.read_text().splitlines()[first - 1] == lines[0].rstrip("\n")
    assert inspect.getsourcefile(wanted) == str(HEAVY)


def test_a_class_loads_with_its_module_level_names():
    assert load_symbol(HEAVY, "Wanted")().apply(3.0) == 12.0


def test_a_needed_missing_import_names_the_module_and_the_stand_in():
    with pytest.raises(MissingUpstreamImport) as info:
        load_symbol(HEAVY, "needs_registry")
    assert info.value.missing == "lph_absent_package"
    assert "heavy_module.py:11" in str(info.value) and "stand_ins={'registry'" in str(info.value)


def test_a_stand_in_replaces_the_import():
    class Registry:
        @staticmethod
        def lookup(key):
            return f"stood in {key}"

    assert load_symbol(HEAVY, "needs_registry", stand_ins={"registry": Registry})() == "stood in x"


def test_an_unknown_name_is_named():
    with pytest.raises(LookupError, match="'absent'"):
        load_symbol(HEAVY, "absent")


def test_names_bound_inside_a_block_are_a_documented_limit():
    uses_hidden = load_symbol(HEAVY, "uses_hidden")
    with pytest.raises(NameError, match="HIDDEN"):
        uses_hidden()
    assert load_symbol(HEAVY, "uses_hidden", stand_ins={"HIDDEN": 5})() == 5


def test_a_method_loads_without_its_class_and_runs_with_a_stand_in_self():
    from types import SimpleNamespace

    from harness.targets.upstream.symbols import load_method

    loss = load_method(HEAVY, "HeavyTrainer", "loss")
    assert loss(SimpleNamespace(offset=1.0), 3.0) == 7.0  # _helper and SCALE came along; the base class never ran
    assert loss.__name__ == "loss" and inspect.getsourcefile(loss) == str(HEAVY)
    with pytest.raises(LookupError, match="HeavyTrainer.missing"):
        load_method(HEAVY, "HeavyTrainer", "missing")


def test_a_closure_inside_a_method_loads_as_a_factory_of_its_free_variables():
    from types import SimpleNamespace

    from harness.targets.upstream.symbols import load_inner

    factory = load_inner(HEAVY, "HeavyTrainer", "step", "processor")
    assert factory.free == ("scale", "self")  # the method's locals it reads; nothing else of the method runs
    assert factory(scale=2.0, self=SimpleNamespace(offset=1.0))(3.0) == 13.0
    with pytest.raises(LookupError, match="no function processor inside HeavyTrainer.loss"):
        load_inner(HEAVY, "HeavyTrainer", "loss", "processor")


# ---- what a history keys a file by when only some of its definitions were loaded (executed_digest) ----------

SELECTORS = ("wanted", "HeavyTrainer.loss", "HeavyTrainer.step.processor")


def _digests(text: str) -> list[str]:
    return [executed_digest(text, [selector]) for selector in SELECTORS]


def test_a_change_outside_what_a_definition_needs_keeps_its_digest():
    text = HEAVY.read_text()
    elsewhere = text.replace('    return registry.lookup("x")', '    return registry.lookup("y")')  # needs_registry
    moved = "# a comment and a moved line\n\n" + text.replace("SCALE = 2.0", "SCALE = 2.0  # the scale")
    assert elsewhere != text and _digests(elsewhere) == _digests(text) == _digests(moved)


@pytest.mark.parametrize(
    "old, new, changed",
    [
        ("return x * SCALE", "return x * SCALE * 2", {"wanted", "HeavyTrainer.loss", "HeavyTrainer.step.processor"}),
        ("return math.sqrt(", "return math.exp(", {"wanted"}),
        ("_helper(x) + self.offset", "_helper(x) - self.offset", {"HeavyTrainer.loss"}),
        ("* scale + self.offset", "* scale * self.offset", {"HeavyTrainer.step.processor"}),
        ('scale = batch["scale"]', 'scale, shift = batch["scale"], 0', set()),  # the closure reads no new local
        ("import math\n", "import cmath as math\n", {"wanted"}),
    ],
)
def test_a_change_in_what_a_definition_executes_changes_its_digest(old, new, changed):
    """The body, a helper it calls (followed across the module), an import it needs: each changes the digest of
    every selector that reaches it, and only those."""
    text = HEAVY.read_text()
    assert old in text
    before, after = _digests(text), _digests(text.replace(old, new))
    assert {s for s, b, a in zip(SELECTORS, before, after) if b != a} == changed


def test_a_definition_the_text_lacks_or_a_text_that_does_not_parse_has_its_own_digest():
    text = HEAVY.read_text()
    renamed = text.replace("def wanted(", "def unwanted(")
    assert executed_digest(renamed, ["wanted"]) != executed_digest(text, ["wanted"])
    assert executed_digest(renamed, ["wanted"]) == executed_digest("", ["wanted"])  # absent either way
    assert executed_digest("def (", ["wanted"]) != executed_digest("def ((", ["wanted"])
