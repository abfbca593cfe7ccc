"""The weighted redeal (engine._lc_search.resample_weighted, hidden_counts)
and the learned belief about the opponent's hand (agents.belief) that the
search's `belief` setting redeals with."""
import json

import numpy as np
import pytest
import torch

import engine
from agents.belief import (belief_loss, load_belief, main as belief_main, play_rows,
                           save_belief, train_belief, uniform_loss)
from agents.searcher import SearchPlayer, oracle_odds
from engine._batch import StateBatch
from engine._lc_search import hidden_counts, resample_weighted, state_hidden_counts


def _midgame(game, seed=3, moves=30):
    state = game.new_initial_state(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(moves):
        state.apply_action(int(rng.choice(state.legal_actions())))
    return state


@pytest.fixture(scope="module")
def game():
    return engine.load_game("lost_cities", max_turns=200)


def test_hidden_counts_are_the_unseen_cards_and_the_opponents_share(game):
    state = game.new_initial_state(seed=1)
    pool, opp = state_hidden_counts(state, 0)
    K = len(pool)
    hand = lambda p: np.asarray(state.information_state_tensor(p))[5:5 + K]      # noqa: E731 (its own hand)
    # at the deal player 0 sees its 8 cards: the other 52 are unseen, 8 of them in the opponent's hand
    assert pool.sum() == 60 - 8 and opp.sum() == 8
    assert np.array_equal(opp, hand(1)) and (opp <= pool).all()
    assert np.array_equal(pool + hand(0), np.where(np.arange(K) % 10 == 0, 3, 1))     # 3 wagers, 1 of each number
    b = StateBatch(game, 3)
    b.fill(state)
    p2, o2 = hidden_counts(b, [0, 2], [0, 1])
    assert np.array_equal(p2[0], pool) and np.array_equal(o2[0], opp) and np.array_equal(o2[1], hand(0))
    with pytest.raises(ValueError, match="rows must be rows"):
        hidden_counts(b, [3], 0)


def test_weighted_redeal_keeps_what_the_player_sees_and_follows_the_odds(game):
    state = _midgame(game)
    me = state.current_player()
    pool, opp = state_hidden_counts(state, me)
    n = 4000
    b = StateBatch(game, n)
    b.fill(state)
    resample_weighted(b, me, 7, oracle_odds(state, me))
    p, o = hidden_counts(b, np.arange(n), me)
    assert (p == pool).all() and (o == opp).all()           # the true odds give the true hand in every world
    seen = np.asarray(state.information_state_tensor(me))
    assert np.array_equal(b.state(5).information_state_tensor(me), seen)
    assert b.state(5).legal_actions() == state.legal_actions()
    # equal odds: the uniform redeal's shares (8 of the unseen cards, each as likely)
    b.fill(state)
    resample_weighted(b, me, 7, np.ones(len(pool)))
    p, o = hidden_counts(b, np.arange(n), me)
    assert (p == pool).all() and (o.sum(1) == opp.sum()).all()
    share = o.sum(0) / np.maximum(pool, 1) / n
    expect = opp.sum() / pool.sum()
    assert np.abs(share[pool > 0] - expect).max() < 0.04
    # odds 9:1 on one colour's unseen cards: its share rises as successive sampling says
    w = np.ones(len(pool))
    w[:10] = 9.0
    b.fill(state)
    resample_weighted(b, me, 8, w)
    _, o = hidden_counts(b, np.arange(n), me)
    assert o[:, :10].sum() / n > 2 * opp.sum() * pool[:10].sum() / pool.sum()
    # weight 0: never dealt to the opponent while others can be
    w = np.ones(len(pool))
    w[:10] = 0.0
    if pool[10:].sum() >= opp.sum():
        b.fill(state)
        resample_weighted(b, me, 9, w)
        assert hidden_counts(b, np.arange(n), me)[1][:, :10].sum() == 0


def test_weighted_redeal_refuses_bad_weights_and_rows(game):
    b = StateBatch(game, 4)
    b.fill(game.new_initial_state(seed=2))
    K = 50
    for bad, match in ((np.ones(K - 1), "a weight per card kind"), (-np.ones(K), "finite and >= 0"),
                       (np.full(K, np.nan), "finite and >= 0"), (np.ones((3, K)), "a weight per card kind")):
        with pytest.raises(ValueError, match=match):
            resample_weighted(b, 0, 1, bad)
    with pytest.raises(ValueError, match="are not in a batch"):
        resample_weighted(b, 0, 1, np.ones(K), 2, 6)
    with pytest.raises(ValueError, match="player must be 0 or 1"):
        resample_weighted(b, 2, 1, np.ones(K))
    kuhn = engine.load_game("kuhn_poker")
    with pytest.raises(ValueError, match="plays lost_cities"):
        resample_weighted(StateBatch(kuhn, 1), 0, 1, np.ones(K))


def test_belief_loss_against_hand_computed_values():
    logits = torch.tensor([[0.0, np.log(3.0)]])           # p = 1/2, 3/4
    pool = torch.tensor([[2, 1]], dtype=torch.uint8)
    opp = torch.tensor([[1, 0]], dtype=torch.uint8)
    # kind 0: one held, one not, at 1/2: 2 log 2; kind 1: one not held at 3/4: -log(1/4)
    assert float(belief_loss(logits, pool, opp)) == pytest.approx(2 * np.log(2) + np.log(4), rel=1e-6)
    # the uniform redeal: 1 of the 3 unseen cards is the opponent's, p = 1/3 for each
    assert uniform_loss(pool, opp) == pytest.approx(-np.log(1 / 3) - 2 * np.log(2 / 3), rel=1e-9)


def test_a_belief_learns_what_the_rows_tell_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    N, T, K = 6000, 12, 6
    info = rng.integers(0, 2, (N, T)).astype(np.float16)
    pool = np.full((N, K), 2, np.uint8)
    # the opponent holds both cards of kind k exactly where info[:, k] is set, none elsewhere
    opp = (2 * info[:, :K]).astype(np.uint8)
    games = np.repeat(np.arange(N // 6), 6).astype(np.int32)
    net, m = train_belief(info, pool, opp, games, minutes=0.1, seed=1, batch=256, log=lambda _: None)
    assert m["below_uniform"] > 0.8 and m["heldout_rows"] == 600
    path = tmp_path / "b.pt"
    save_belief(path, net, m)
    again = load_belief(str(path))
    x = torch.from_numpy(info[:5].astype(np.float32))
    with torch.inference_mode():
        assert torch.equal(again.net(x), net(x))
    (tmp_path / "not.pt").write_bytes(b"nothing")
    with pytest.raises(ValueError, match="cannot read a belief from .*not.pt"):
        load_belief(str(tmp_path / "not.pt"))
    torch.save({"format": "other"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="is not a belief file"):
        load_belief(str(tmp_path / "other.pt"))


def test_the_command_plays_learns_and_the_search_redeals_with_it(tmp_path, capsys):
    from tests.test_head_to_head import LC_SMALL, _save_run
    _save_run(tmp_path / "run", 1)
    assert belief_main([str(tmp_path / "run"), "--games", "40", "--minutes", "0.02"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["out"] == str(tmp_path / "run" / "belief.pt") and out["games"] == 40
    from agents.policy import load_policy
    policy = load_policy(str(tmp_path / "run"), kind="average-greedy")
    info, pool, opp, games = play_rows(policy, 6, seed=2, batch=4)
    assert len(info) == len(pool) == len(opp) == len(games) and set(games.tolist()) == set(range(6))
    assert (opp <= pool).all() and info.shape[1] == policy.game.information_state_tensor_size()
    game = policy.game
    player = SearchPlayer(game, blueprint=policy, worlds=4, topk=2, playout="blueprint", depth=2,
                          belief=str(tmp_path / "run" / "belief.pt"))
    state = _midgame(game, seed=4, moves=6)
    assert state.current_player() in (0, 1)
    odds = player.belief.odds(state, state.current_player())
    assert odds.shape == (3 * (LC_SMALL["ranks"] + 1),) and (odds > 0).all()
    assert player.step(state) in state.legal_actions() and "belief=belief.pt" in player.name
    with pytest.raises(ValueError, match="race"):
        SearchPlayer(game, worlds=4, belief=player.belief, schedule="race")
    with pytest.raises(ValueError, match="one or the other"):
        SearchPlayer(game, blueprint=policy, worlds=4, playout="blueprint", belief=player.belief, oracle="hand")
    with pytest.raises(ValueError, match="not a belief file|cannot read a belief"):
        SearchPlayer(game, blueprint=policy, worlds=4, topk=2, playout="blueprint", belief=str(tmp_path / "run"))
    with pytest.raises(SystemExit):
        belief_main([str(tmp_path / "run"), "--games", "3"])
    assert "--games must be at least 10" in capsys.readouterr().err


def test_an_oracle_search_with_batched_playouts_plays_the_true_hand(game, monkeypatch):
    """oracle=hand in the halving schedule: every world the search plays
    deals the opponent its true hand; endgame:D plays the true deal once
    the deck is that short; without either the redeal is uniform."""
    import agents.searcher as searcher
    state = _midgame(game, seed=5, moves=20)
    me = state.current_player()
    _, opp = state_hidden_counts(state, me)
    dealt = []

    def spy(batch, player, seed, weights, start, stop):
        resample_weighted(batch, player, seed, weights, start, stop)
        dealt.append(hidden_counts(batch, np.arange(start, stop), player)[1])

    monkeypatch.setattr(searcher, "resample_weighted", spy)
    player = SearchPlayer(game, worlds=16, playout="random", schedule="halving", oracle="hand")
    player.search(state)
    assert dealt and all((d == opp).all() for d in dealt)
    dealt.clear()
    uniform = SearchPlayer(game, worlds=16, playout="random", schedule="halving")
    uniform.search(state)
    assert not dealt and uniform.weights is None and uniform.redeal
    late = SearchPlayer(game, worlds=16, playout="random", schedule="halving", oracle=f"endgame:{state.deck_size()}")
    late.search(state)
    assert not late.redeal and not dealt
