"""The seeds a run derives from run.seed (trainer/seeds.py): each the
expression the loop always used, and distinct where two streams must be."""
import pytest

from trainer.seeds import (exit_deals_seed, exit_heldout_seed, exit_nets_seed, memory_seed, reinit_advantage_seed,
                           strategy_memory_seed, warm_start_deals_seed)

SEEDS = (0, 1, 7, 12345)


@pytest.mark.parametrize("seed", SEEDS)
def test_each_seed_is_the_expression_the_loop_used(seed):
    assert [memory_seed(seed, p) for p in (0, 1)] == [seed * 3 + p + 1 for p in (0, 1)]
    assert strategy_memory_seed(seed) == seed * 3 + 3
    assert warm_start_deals_seed(seed) == (seed + 1) * 1000003
    for r in (1, 2, 5):
        assert exit_deals_seed(seed, r) == (seed + 1) * 1000003 + r * 7000001
        assert exit_nets_seed(seed, r) == seed * 100003 + 7919 * r
        assert exit_heldout_seed(seed, r) == seed * 7919 + r
    for t in (1, 2, 40):
        for p in (0, 1):
            assert reinit_advantage_seed(seed, t, p) == seed * 100003 + t * 2 + p


@pytest.mark.parametrize("seed", SEEDS)
def test_the_memories_and_the_nets_of_the_two_players_have_their_own_seeds(seed):
    assert len({memory_seed(seed, 0), memory_seed(seed, 1), strategy_memory_seed(seed)}) == 3
    assert len({reinit_advantage_seed(seed, t, p) for t in range(1, 20) for p in (0, 1)}) == 38


@pytest.mark.parametrize("seed", SEEDS)
def test_each_rounds_deals_and_nets_differ_from_the_warm_starts_and_each_others(seed):
    deals = [warm_start_deals_seed(seed)] + [exit_deals_seed(seed, r) for r in range(1, 6)]
    assert len(set(deals)) == 6
    # a round's games (up to 7000001 deals) start past the previous round's
    assert all(b - a == 7000001 for a, b in zip(deals[1:], deals[2:]))
    assert len({exit_nets_seed(seed, r) for r in range(1, 6)}) == 5
    assert len({exit_heldout_seed(seed, r) for r in range(1, 6)}) == 5
