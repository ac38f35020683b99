"""The gate: what turns the suite's verdicts into a decision a maintainer keeps switched on.

Data flows one way: pytest (the plugin) writes each check's raw verdict, with
its tier, to ``verdicts.json``; the gate then reads verdicts, never runs a
check itself except to replay a counterexample on the other side of a
base-vs-PR comparison.

* ``tiers``: every check has exactly one tier (contract, budget, hardening);
* ``verdicts``: the raw verdict of one check and the JSON file of a run;
* ``expectations``: known upstream failures, one entry each with a true reason;
* ``single``: one target against its expectations (PASS/FAIL/KNOWN/FIXED/UNSUPPORTED);
* ``compare``: base vs PR (NEW FAIL / FIXED / STILL FAILING / PASS), with replays;
* ``render``: report.md, the PR-comment summary and gate.json;
* ``specs`` / ``runner``: SPEC strings to targets, one pytest run per side;
* ``history``: base-vs-PR over an upstream repository's commits.

docs/gate.md holds the tier table and the decisions.
"""
