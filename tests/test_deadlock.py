"""The hang proof's rules, without processes (harness/ranks/deadlock.py; the pool's use is in tests/test_pool.py)."""

from harness.ranks.deadlock import HOLD_S, Stranded, Waiting, Watch, prove

IN_WORLD = "all_reduce[SUM] group=(0, 1) shape=(3,) float32 forward"
IN_CP = "all_gather group=(1, 3) shape=(2,) float32 forward"


def test_a_rank_inside_a_collective_its_finished_peer_never_reached_is_stranded():
    stranded = prove({0: Waiting(IN_WORLD, 2, True)}, {1: {(0, 1): 1}})
    assert stranded == {0: Stranded((0, 1), 2, ((1, 1),))}


def test_a_peer_that_issued_as_many_collectives_proves_nothing():
    assert prove({0: Waiting(IN_WORLD, 2, True)}, {1: {(0, 1): 2}}) == {}
    assert prove({0: Waiting(IN_WORLD, 2, True)}, {1: {(0, 1): 3}}) == {}


def test_a_rank_no_longer_inside_its_last_collective_proves_nothing():
    assert prove({0: Waiting(IN_WORLD, 2, False)}, {1: {(0, 1): 0}}) == {}


def test_one_computing_rank_withholds_the_proof_for_all():
    """A computing rank may still raise, and its exception is then the cause: no proof while one computes."""
    waiting = {0: Waiting(IN_WORLD, 1, True), 2: Waiting(IN_WORLD, 5, False)}
    assert prove(waiting, {1: {}}) == {}


def test_only_finished_members_of_the_group_count():
    """Rank 2 finished, but rank 1's collective is on (1, 3): rank 3 may still join it."""
    assert prove({1: Waiting(IN_CP, 1, True), 3: Waiting("broadcast group=(2, 3)", 1, True)}, {2: {}}) == {
        3: Stranded((2, 3), 1, ((2, 0),))
    }
    assert prove({1: Waiting(IN_CP, 1, True)}, {2: {}, 0: {}}) == {}


def test_nothing_finished_proves_nothing():
    assert prove({0: Waiting(IN_WORLD, 1, True), 1: Waiting(IN_WORLD, 1, True)}, {}) == {}


def test_the_proof_counts_only_after_the_same_state_held():
    watch = Watch()
    waiting, issued = {0: Waiting(IN_WORLD, 1, True)}, {1: {}}
    assert watch.observe(10.0, waiting, issued) == {}
    assert watch.observe(10.0 + HOLD_S / 2, waiting, issued) == {}
    assert watch.observe(10.0 + HOLD_S, waiting, issued) == prove(waiting, issued)


def test_a_changed_state_restarts_the_hold():
    """The shared state is not written atomically: a torn read must hold for HOLD_S like any other."""
    watch = Watch()
    issued = {1: {}}
    watch.observe(0.0, {0: Waiting(IN_WORLD, 1, True)}, issued)
    moved = {0: Waiting(IN_WORLD, 2, True)}
    assert watch.observe(HOLD_S, moved, issued) == {}
    assert watch.observe(HOLD_S * 1.5, moved, issued) == {}
    assert watch.observe(HOLD_S * 2, moved, issued) != {}


def test_an_interrupted_proof_restarts_the_hold():
    watch = Watch()
    stuck, left = {0: Waiting(IN_WORLD, 1, True)}, {0: Waiting(IN_WORLD, 1, False)}
    watch.observe(0.0, stuck, {1: {}})
    watch.observe(HOLD_S / 2, left, {1: {}})
    assert watch.observe(HOLD_S, stuck, {1: {}}) == {}
    assert watch.observe(HOLD_S * 2, stuck, {1: {}}) != {}
