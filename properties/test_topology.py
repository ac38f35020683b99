"""Topology invariance: the same rows, another TP degree, CP layout or chunk size, the same results.

A row's log-prob, entropy and logits gradient must not depend on how the
trainer (or the rollout engine) laid the batch out: TP 1/2/4, CP none /
zigzag / allgather at 2 or 4, any chunk size, and therefore any position
of the row among any other rows (docs/topology.md).

Tiers (docs/gate.md): for a target declaring ``topology_invariant`` (impl)
the contract is bit for bit; for any other target the contract is both
topologies within the tolerance policy of the float64 oracle, and the
``_bit_for_bit`` twin (every target, special values too) is hardening.
The token-level pair (cp=1: TP degree and chunk size) serves token-only
targets (NeMo-RL, SkyRL's Functions).
"""

import pytest
from hypothesis import given, settings

from harness.cases.strategies import LAYOUT_FREE_ANY_VALUES, TOKEN_LEVEL, topology_pairs
from harness.checks.topology import check_token_topology_invariance, check_topology_invariance

# Each example runs the target twice, on up to two rank pools: an eighth of the active profile's examples
# (10 under ``ci``, 125 under ``thorough``, at least 5) keeps the file near a minute in ``nox -s tests``.
SHARE = settings(max_examples=max(5, settings.default.max_examples // 8))


@pytest.mark.tier("contract")
@SHARE
@given(case=topology_pairs())
def test_topology_invariance(case, spec):
    check_topology_invariance(case, spec)


@pytest.mark.tier("hardening")
@SHARE
@given(case=topology_pairs(special=LAYOUT_FREE_ANY_VALUES))
def test_topology_invariance_bit_for_bit(case, spec):
    check_topology_invariance(case, spec, exact=True)


@pytest.mark.tier("contract")
@SHARE
@given(case=topology_pairs(cp_sizes=TOKEN_LEVEL))
def test_token_topology_invariance(case, spec):
    check_token_topology_invariance(case, spec)


@pytest.mark.tier("hardening")
@SHARE
@given(case=topology_pairs(cp_sizes=TOKEN_LEVEL, special=LAYOUT_FREE_ANY_VALUES))
def test_token_topology_invariance_bit_for_bit(case, spec):
    check_token_topology_invariance(case, spec, exact=True)
