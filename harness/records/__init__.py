"""Records: the pages the project generates and nobody edits (``docs/records/``).

A record is rendered from data, never typed: the family pages from the
registry (``harness/targets/registry.py``) and the expectations files, the
conformance page and the gate tables from the newest gate run of each
family, the history tables from the history command's output. The runs'
own outputs are copied into ``docs/records/data/`` (a snapshot per family,
dated and naming the harness revision the run used), so a fresh clone
renders the same pages; ``nox -s docs`` (``python -m harness.records``)
imports what a newer run left in ``reports/`` and renders everything again.
Rendering is deterministic: a second run changes nothing
(``tests/test_records.py``).
"""
