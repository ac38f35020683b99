"""The upstream workflow's header names every family the registry has, and its default is one of them.

A maintainer copying ``ci/upstream-gate.yml`` reads its header to learn what
FAMILY may be; a family added to ``harness/targets/registry.py`` and missing
there (or one removed and still listed) makes this fail.
"""

import re

from harness import ROOT
from harness.targets import registry

WORKFLOW = ROOT / "ci" / "upstream-gate.yml"
LISTED = re.compile(r"families of\s+#?\s*harness/targets/registry\.py:\s*(.*?)\.\n", re.S)


def _header() -> str:
    return "".join(line + "\n" for line in WORKFLOW.read_text().splitlines() if line.startswith("#"))


def test_header_lists_exactly_the_registry_families():
    found = LISTED.search(_header())
    assert found, "the header must list the families: '... families of harness/targets/registry.py: a, b, c.'"
    listed = {name.strip() for name in found.group(1).replace("#", " ").split(",")}
    assert listed == set(registry.names()), (sorted(listed), sorted(registry.names()))


def test_default_family_is_a_registry_family():
    default = re.search(r"^\s+FAMILY:\s*(\S+)", WORKFLOW.read_text(), re.M)
    assert default and default.group(1) in registry.names()


def test_header_says_how_a_library_without_a_family_is_gated():
    header = _header()
    assert "without a family" in header and "path.py:Class" in header and "docs/targets.md" in header
