"""load_symbol: one function or class out of a module whose imports cannot run here (upstream/symbols.py)."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from harness.targets.upstream.symbols import MissingUpstreamImport, load_symbol

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
