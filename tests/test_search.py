"""agents.search: determinized search with heuristic, random and blueprint playouts."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import engine
from batcher.networks import net_for_game
from engine._batch import StateBatch
from agents.matches import duplicate_match
from agents.policy import AveragePolicy
from agents.searcher import SearchPlayer, make_search_player, parse_search_spec

ROOT = Path(__file__).resolve().parents[1]
LC_SMALL = dict(colours=3, ranks=5, hand_size=4, max_turns=200)
torch.set_num_threads(1)


def _midgame(game, seed, moves=8):
    state = game.new_initial_state(seed=seed)
    for _ in range(moves):
        state.apply_action(game.heuristic_action(state))
    return state


def _blueprint(game, seed=0):
    net = net_for_game(game, hidden=(16,), seed=seed)
    with torch.no_grad():
        net.net[-1].weight.mul_(4.0)
    return AveragePolicy(net, greedy=True)


def _replay_worlds(game, state, seed, k):
    worlds = StateBatch(game, k)
    worlds.fill(state)
    worlds.resample(state.current_player(), seed)
    return [worlds.state(w) for w in range(k)]


def _mean_final(game, state, seed, k, action, then):
    """The player to act's mean final return over the k replayed worlds when
    it plays `action`, then then(s) plays on, then the heuristic for both."""
    me = state.current_player()
    finals = []
    for world in _replay_worlds(game, state, seed, k):
        s = world.clone()
        s.apply_action(action)
        then(s)
        while not s.is_terminal():
            s.apply_action(game.heuristic_action(s))
        finals.append(s.returns()[me])
    return np.mean(finals)


def test_search_values_are_heuristic_playouts_of_every_action_in_every_world():
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = _midgame(game, 3)
    player = SearchPlayer(game, worlds=5, chunk=5, halving=False, seed=1)
    seed = int(player.decision_rng(state).integers(1 << 62))
    cands, values, share = player.search(state)
    assert cands == state.legal_actions()
    me = state.current_player()
    finals = np.zeros((len(cands), 5))
    for w, world in enumerate(_replay_worlds(game, state, seed, 5)):
        for j, a in enumerate(cands):
            s = world.clone()
            s.apply_action(a)
            while not s.is_terminal():
                s.apply_action(game.heuristic_action(s))
            finals[j, w] = s.returns()[me]
    assert np.allclose(values, finals.mean(axis=1))
    best = finals.max(axis=0)
    assert np.allclose(share, ((finals == best) / (finals == best).sum(axis=0)).sum(axis=1) / 5)
    assert share.sum() == pytest.approx(1.0)
    assert player.step(state) in cands


def test_blueprint_candidates_and_playouts():
    game = engine.load_game("lost_cities", **LC_SMALL)
    bp = _blueprint(game)
    state = _midgame(game, 4)
    player = SearchPlayer(game, blueprint=bp, worlds=3, chunk=3, topk=2, playout="blueprint", depth=3,
                          halving=False, seed=2)
    probs = bp.action_probs(state)
    top = sorted(sorted(probs, key=lambda a: (-probs[a], a))[:2])
    seed = int(player.decision_rng(state).integers(1 << 62))
    cands, values, _ = player.search(state)
    assert cands == top

    def blueprint_both(s):                   # the greedy blueprint for both sides, then the heuristic
        for _ in range(3):
            if s.is_terminal():
                break
            s.apply_action(bp.step(s))
    for j, a in enumerate(cands):
        assert values[j] == pytest.approx(_mean_final(game, state, seed, 3, a, blueprint_both))


@pytest.mark.parametrize("depth", [0, 2])
def test_mixed_playouts_give_the_searcher_the_blueprint_and_the_opponent_the_heuristic(depth):
    game = engine.load_game("lost_cities", **LC_SMALL)
    bp = _blueprint(game, seed=1)
    state = _midgame(game, 5)
    player = SearchPlayer(game, blueprint=bp, worlds=3, chunk=3, playout="mixed", depth=depth, halving=False,
                          seed=3)
    seed = int(player.decision_rng(state).integers(1 << 62))
    cands, values, _ = player.search(state)
    assert cands == state.legal_actions()
    me = state.current_player()

    def mixed(s):       # the greedy blueprint for the searcher's next `depth`, the heuristic for the opponent
        mine = 0
        while not s.is_terminal():
            if s.current_player() != me:
                s.apply_action(game.heuristic_action(s))
            elif depth == 0 or mine < depth:
                s.apply_action(bp.step(s))
                mine += 1
            else:
                return
    for j, a in enumerate(cands):
        assert values[j] == pytest.approx(_mean_final(game, state, seed, 3, a, mixed))
    assert "playout=mixed,depth=%d" % depth in player.name
    with pytest.raises(ValueError, match="need a blueprint"):
        SearchPlayer(game, playout="mixed")


def test_search_beats_random_and_keeps_to_its_time_budget():
    game = engine.load_game("lost_cities", **LC_SMALL)
    r = duplicate_match(game, SearchPlayer(game, worlds=8, seed=0), "random", 8, seed=5)
    assert r["wins"] == 8
    budget = SearchPlayer(game, worlds=64, chunk=4, time_limit_s=1e-6, halving=False, seed=0)
    budget.step(_midgame(game, 6))
    assert budget.worlds_played == 4                 # one chunk, then the time is up


def test_sequential_halving_spends_the_plain_budget_on_the_contenders():
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = _midgame(game, 7)
    A = len(state.legal_actions())
    assert A >= 5
    player = SearchPlayer(game, worlds=32, seed=3, schedule="halving")
    calls = []
    inner = player._chunk_values

    def spy(st, me, cands, k):
        calls.append((tuple(cands), k))
        return inner(st, me, cands, k)

    player._chunk_values = spy
    cands, values, share = player.search(state)
    playouts = sum(len(c) * k for c, k in calls)
    assert playouts <= 32 * A                                  # no more than the plain search
    rounds = [c for c, _ in calls]
    assert len(rounds[0]) == A and len(rounds[-1]) == 2        # all candidates first, two at the end
    seen = {a: sum(k for c, k in calls if a in c) for a in cands}
    finalists = set(rounds[-1])
    assert min(seen[a] for a in finalists) > 1.5 * 32          # the contenders saw more worlds
    assert cands[int(np.argmax(values))] in finalists
    assert np.isfinite(values).sum() == 2 and share.sum() == pytest.approx(1.0)


def test_bad_settings_are_named():
    game = engine.load_game("lost_cities", **LC_SMALL)
    with pytest.raises(ValueError, match="need a blueprint"):
        SearchPlayer(game, topk=3)
    with pytest.raises(ValueError, match="playout must be"):
        SearchPlayer(game, playout="greedy")
    with pytest.raises(ValueError, match="plays lost_cities"):
        SearchPlayer(engine.load_game("kuhn_poker"))
    with pytest.raises(ValueError, match="bad search setting 'wrolds=4'"):
        parse_search_spec("wrolds=4")
    with pytest.raises(ValueError, match="needs a int"):
        parse_search_spec("worlds=many")
    assert parse_search_spec("worlds=64,topk=4,time=20") == {"worlds": 64, "topk": 4, "time_limit_s": 0.02}
    p = make_search_player("heuristic,worlds=16")
    assert p.worlds == 16 and p.playout == "heuristic" and p.game.params["max_turns"] == 200
    p = make_search_player("random")
    assert p.worlds == 640 and p.playout == "random" and p.topk == 0


def test_evaluate_cli_runs_the_search_with_a_blueprint(tmp_path):
    from trainer.checkpoint import save_checkpoint
    game = engine.load_game("lost_cities", **LC_SMALL)
    nets = {k: net_for_game(game, hidden=(8,), seed=i) for i, k in enumerate(("strategy", "adv0", "adv1"))}
    save_checkpoint(tmp_path, 1, {"config": {"game": {"name": "lost_cities", "params": LC_SMALL}},
                                  "nets": {k: n.state_dict() for k, n in nets.items()},
                                  "net_spec": nets["strategy"].spec()})
    r = subprocess.run([sys.executable, "-m", "agents.evaluate", str(tmp_path), "--opponent", "random",
                        "--games", "4", "--search", "worlds=4,topk=2", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import json
    d = json.loads(r.stdout)
    # unset settings are the measured best: heuristic playouts, raced
    assert d["search"].startswith("search(worlds=4,race(") and d["vs_random_games"] == 4
    assert "topk=2,playout=heuristic)" in d["search"]
    # bare --search: every setting is the default
    r = subprocess.run([sys.executable, "-m", "agents.evaluate", str(tmp_path), "--opponent", "random",
                        "--games", "2", "--search", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["search"] == "search(worlds=640,race(z=3,eps=0.1),topk=4,playout=heuristic)"
    # a bare --search before the checkpoint takes it as its settings: the error says so
    r = subprocess.run([sys.executable, "-m", "agents.evaluate", "--search", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--search took" in r.stderr and "put the checkpoint before --search" in r.stderr
    # --jobs: the same deals in worker processes, the same results
    runs = [subprocess.run([sys.executable, "-m", "agents.evaluate", str(tmp_path), "--opponent", "heuristic",
                            "--games", "6", "--search", "worlds=4,topk=2,playout=blueprint,depth=2", "--json",
                            "--jobs", j],
                           cwd=ROOT, capture_output=True, text=True, timeout=300) for j in ("1", "2")]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    one, two = ({k: v for k, v in json.loads(r.stdout).items() if k != "ms_per_decision"} for r in runs)
    assert one == two and one["vs_heuristic_games"] == 6
    bad = subprocess.run([sys.executable, "-m", "agents.evaluate", str(tmp_path), "--jobs", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--jobs must be at least 1" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "agents.evaluate", str(tmp_path), "--search", "worlds=x"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --search") and "Traceback" not in bad.stderr


def _heuristic_final(game, world, action, me):
    s = world.clone()
    s.apply_action(action)
    while not s.is_terminal():
        s.apply_action(game.heuristic_action(s))
    return s.returns()[me]


# The heuristic's moves on 40 games of each variant (a random share of random
# moves reaches odd states), as digests recorded from the first version of
# lc_heuristic_action, which looped over every kind. Its set-bit walk (about
# twice as fast) must play the same moves, ties included.
HEURISTIC_DIGESTS = [
    (LC_SMALL, 1870, "cbbdb8f79a6e1f2c"),
    (dict(max_turns=200), 6278, "a22622fe70aa9147"),
    (dict(colours=6, max_turns=200), 8364, "a0e0f0c7477bd84c"),
    (dict(wagers=0, max_turns=200), 3552, "bb6374e7575b6ecb"),
    (dict(colours=6, ranks=12, wagers=4, hand_size=12, max_turns=200), 9334, "d4176892f6b6a157"),
]


@pytest.mark.parametrize("params,moves,digest", HEURISTIC_DIGESTS)
def test_heuristic_plays_the_recorded_moves(params, moves, digest):
    import hashlib
    game = engine.load_game("lost_cities", **params)
    rng = np.random.default_rng(0)
    h = hashlib.sha256()
    n = 0
    for d in range(40):
        s = game.new_initial_state(seed=d)
        eps = rng.random()
        while not s.is_terminal():
            a = game.heuristic_action(s)
            h.update(int(a).to_bytes(2, "little"))
            n += 1
            s.apply_action(a if rng.random() > eps else int(rng.choice(s.legal_actions())))
    assert (n, h.hexdigest()[:16]) == (moves, digest)


def test_race_values_are_heuristic_playouts_in_common_worlds():
    from engine._lc_search import race_values, search_values
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = _midgame(game, 7)
    me = state.current_player()
    cands = state.legal_actions()
    A = len(cands)
    b, vals, seen = race_values(state, me, 11, cands, 40 * A, first_round=4, chunk=4, z=1.0, eps=0.0)
    assert vals.shape == (A, seen.max()) and seen.sum() <= 40 * A
    worlds = _replay_worlds(game, state, 11, int(seen.max()))
    for j, a in enumerate(cands):
        assert np.isnan(vals[j, seen[j]:]).all()
        for w in range(seen[j]):
            assert vals[j, w] == _heuristic_final(game, worlds[w], a, me)
    assert np.array_equal(search_values(state, me, 11, cands, 0, int(seen.max())), np.array(
        [[_heuristic_final(game, worlds[w], a, me) for w in range(int(seen.max()))] for a in cands]))
    last = np.flatnonzero(seen == seen.max())
    means = np.nanmean(vals[last], axis=1)
    assert b == last[int(np.argmax(means))]
    # a candidate paired with itself is never worse: with eps 0 both copies
    # spend the whole budget, with eps > 0 one copy leaves after the first step
    b, vals, seen = race_values(state, me, 11, [cands[0], cands[0]], 40, first_round=4, z=3.0, eps=0.0)
    assert list(seen) == [20, 20] and b == 0 and not np.isnan(vals).any()
    b, vals, seen = race_values(state, me, 11, [cands[0], cands[0]], 40, first_round=4, z=3.0, eps=0.1)
    assert list(seen) == [4, 4] and b == 0
    with pytest.raises(ValueError, match="illegal candidate"):
        race_values(state, me, 11, [-1], 10)


def test_race_worlds_redeal_what_hidden_says():
    """World w of a race: hidden 0 is StateBatch.resample's row w; 1 keeps
    the opponent's true hand and shuffles only the deck; 2 is the state."""
    from engine._lc_search import race_world
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = _midgame(game, 7)
    me = state.current_player()
    true = state.to_dict()
    replayed = _replay_worlds(game, state, 11, 6)
    orders = set()
    for w in range(6):
        assert race_world(state, me, 11, w).to_dict() == replayed[w].to_dict()
        world = race_world(state, me, 11, w, hidden=1).to_dict()
        assert world["hands"] == true["hands"] and sorted(world["deck"]) == sorted(true["deck"])
        assert {k: v for k, v in world.items() if k != "deck"} == {k: v for k, v in true.items() if k != "deck"}
        orders.add(tuple(world["deck"]))
        assert race_world(state, me, 11, w, hidden=2).to_dict() == true
    assert len(orders) > 1
    assert any(replayed[w].to_dict()["hands"] != true["hands"] for w in range(6))
    assert state.history() and not race_world(state, me, 11, 0, hidden=2).history()     # nothing to undo
    with pytest.raises(ValueError, match="hidden must be"):
        race_world(state, me, 11, 0, hidden=3)


def test_race_values_in_oracle_worlds():
    from engine._lc_search import race_values, race_world
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = _midgame(game, 7)
    me = state.current_player()
    cands = state.legal_actions()
    b, vals, seen = race_values(state, me, 11, cands, 40 * len(cands), first_round=4, chunk=4, z=1.0, eps=0.0,
                                hidden=1)
    for j, a in enumerate(cands):
        for w in range(seen[j]):
            assert vals[j, w] == _heuristic_final(game, race_world(state, me, 11, w, hidden=1), a, me)
    # perfect information: every world is the true deal, the leader its best move
    b, vals, seen = race_values(state, me, 11, cands, 40 * len(cands), first_round=4, hidden=2)
    finals = [_heuristic_final(game, state, a, me) for a in cands]
    for j in range(len(cands)):
        assert (vals[j, :seen[j]] == finals[j]).all()
    assert b == int(np.argmax(finals))
    with pytest.raises(ValueError, match="hidden must be"):
        race_values(state, me, 11, cands, 10, hidden=-1)


def test_oracle_search_player():
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = _midgame(game, 7)
    me = state.current_player()
    seer = SearchPlayer(game, worlds=32, seed=3, oracle="all")
    assert "oracle=all" in seer.name
    finals = [_heuristic_final(game, state, a, me) for a in state.legal_actions()]
    assert seer.step(state) == state.legal_actions()[int(np.argmax(finals))]
    # an endgame oracle sees nothing while the deck is longer than its D
    plain = SearchPlayer(game, worlds=32, seed=3)
    late = SearchPlayer(game, worlds=32, seed=3, oracle=f"endgame:{state.deck_size() - 1}")
    a, b = plain.search(state), late.search(state)
    assert a[0] == b[0] and np.array_equal(a[1], b[1])
    at = SearchPlayer(game, worlds=32, seed=3, oracle=f"hand+endgame:{state.deck_size()}")
    assert np.array_equal(at.search(state)[1], seer.search(state)[1])
    for bad in ("deck", "endgame", "endgame:x", "hand+hand", "all+endgame:3"):
        with pytest.raises(ValueError, match="bad oracle"):
            SearchPlayer(game, worlds=8, oracle=bad)
    # the halving schedule sees them too (its worlds: test_the_oracle_of_a_batched_search_plays_the_true_hands)
    assert SearchPlayer(game, worlds=8, oracle="hand", schedule="halving").sees_hand


def test_race_player_picks_among_the_survivors():
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = _midgame(game, 7)
    player = SearchPlayer(game, worlds=32, seed=3)
    assert player.schedule == "race" and "race" in player.name
    cands, values, share = player.search(state)
    assert cands == state.legal_actions()
    assert np.isfinite(values).sum() >= 1 and share.sum() == pytest.approx(1.0)
    assert player.step(state) == cands[int(np.argmax(values))]
    assert 1 <= player.worlds_played and player.worlds_played <= 32 * len(cands)
    probs = player.action_probs(state)
    assert set(probs) == set(cands) and sum(probs.values()) == pytest.approx(1.0)
    timed = SearchPlayer(game, worlds=10_000, chunk=4, time_limit_s=1e-6, seed=0)
    timed.search(state)
    assert timed.worlds_played == 4                 # one step, then the time is up
    with pytest.raises(ValueError, match="race schedule"):
        SearchPlayer(game, playout="random", schedule="race")
    assert SearchPlayer(game, playout="random").schedule == "halving"
    assert SearchPlayer(game, halving=False).schedule == "plain"
    assert parse_search_spec("schedule=race,z=2.5,eps=0")["z"] == 2.5


def test_last_values_keep_every_candidates_mean_also_of_those_that_left_the_race():
    game = engine.load_game("lost_cities", **LC_SMALL)
    state = _midgame(game, 11)
    for schedule in ("race", "halving", "plain"):
        player = SearchPlayer(game, worlds=32, seed=5, schedule=schedule)
        cands, final, _ = player.search(state)
        vcands, means, seen = player.last_values
        assert vcands == cands and len(means) == len(seen) == len(cands)
        # every candidate is played in the first worlds, so each has a value, and a survivor's is its final one
        assert (seen >= 1).all() and np.isfinite(means).all(), schedule
        alive = np.isfinite(final)
        np.testing.assert_allclose(means[alive], final[alive])
        assert seen[int(np.argmax(final))] == seen.max(), schedule     # the choice saw the most worlds
    # the race's values are heuristic playouts in common worlds: a candidate's mean is within its playouts' range
    player = SearchPlayer(game, worlds=32, seed=5)
    player.search(state)
    _, means, _ = player.last_values
    assert np.all(np.abs(means) <= game.max_utility())


def test_prefer_keeps_the_blueprints_move_unless_the_search_drops_it():
    game = engine.load_game("lost_cities", **LC_SMALL)
    bp = _blueprint(game, seed=2)
    kept = overruled = 0
    for seed in range(12):
        state = _midgame(game, seed, moves=2 * (seed % 4) + 2)
        if len(state.legal_actions()) < 3:
            continue
        # the same seed: the same race, so the plain player's values are the preferring player's
        cands, values, _ = SearchPlayer(game, worlds=24, seed=seed).search(state)
        probs = bp.action_probs(state)
        own = max(state.legal_actions(), key=lambda a: (probs[a], -a))
        best = cands[int(np.argmax(values))]
        chosen = SearchPlayer(game, blueprint=bp, worlds=24, seed=seed, prefer=True).step(state)
        if np.isfinite(values[cands.index(own)]):
            assert chosen == own
            kept += own != best
        else:
            assert chosen == best
            overruled += 1
    assert kept >= 1 and overruled >= 1       # both branches were taken
    assert "prefer=blueprint" in SearchPlayer(game, blueprint=bp, prefer=True).name
    with pytest.raises(ValueError, match="prefer keeps the blueprint's move"):
        SearchPlayer(game, prefer=True)
    assert parse_search_spec("prefer=1,worlds=8") == {"prefer": True, "worlds": 8}


def test_the_floor_searches_only_the_moves_the_blueprint_finds_likely():
    """floor=f: the candidates are the blueprint's moves at least f times as
    likely as its most likely one (then its topk most likely); one left is
    played without a search."""
    game = engine.load_game("lost_cities", **LC_SMALL)
    bp = AveragePolicy(net_for_game(game, hidden=(16,), seed=1), greedy=False)     # soft: several likely moves
    seen_cut = seen_one = 0
    for seed in range(16):
        state = _midgame(game, seed, moves=seed % 6 + 1)
        probs = bp.action_probs(state)
        top = max(probs[a] for a in state.legal_actions())
        for floor in (0.3, 0.9):
            want = sorted(a for a in state.legal_actions() if probs[a] >= floor * top)
            player = SearchPlayer(game, blueprint=bp, worlds=4, chunk=4, floor=floor, seed=seed)
            assert player.candidates(state) == want
            assert SearchPlayer(game, blueprint=bp, worlds=4, floor=floor, topk=1).candidates(state) == \
                [max(want, key=lambda a: (probs[a], -a))]
            seen_cut += len(want) < len(state.legal_actions())
            if len(want) == 1:
                played = player.worlds_played
                assert player.step(state) == want[0] and player.worlds_played == played    # no search
                seen_one += 1
    assert seen_cut and seen_one
    assert "floor=0.3" in SearchPlayer(game, blueprint=bp, floor=0.3).name
    assert parse_search_spec("floor=0.25,topk=3") == {"floor": 0.25, "topk": 3}
    for bad, match in [(dict(blueprint=bp, floor=1.5), "floor must be in"),
                       (dict(floor=0.5), "floor keeps the blueprint's likely moves")]:
        with pytest.raises(ValueError, match=match):
            SearchPlayer(game, **bad)


def test_bf16_searches_with_a_cast_copy_of_the_blueprint_and_its_critic():
    """bf16=1: the player's blueprint is a copy whose strategy net and critic
    hold bfloat16 weights (the caller's stay float32); its probabilities and
    values stay within bfloat16's rounding of the float32 ones, and a batch
    of 5 rows is answered as the same rows padded to 16."""
    from agents.probs import _forward
    from batcher.networks import MLP
    game = engine.load_game("lost_cities", **LC_SMALL)
    T = game.information_state_tensor_size()
    torch.manual_seed(0)
    bp = AveragePolicy(net_for_game(game, hidden=(16,), seed=1), greedy=True,
                       critic=MLP(T, 1, (16,), input_scale=game.input_scale()))
    player = SearchPlayer(game, blueprint=bp, worlds=8, chunk=8, topk=3, playout="critic", depth=2, bf16=True)
    fast = player.blueprint
    assert fast is not bp and "bf16" in player.name
    assert {p.dtype for p in fast.net.parameters()} == {p.dtype for p in fast.critic.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in bp.net.parameters()} == {p.dtype for p in bp.critic.parameters()} == {torch.float32}
    states = [_midgame(game, seed, moves=seed % 5 + 1) for seed in range(5)]
    info = np.stack([s.information_state_tensor(s.current_player()) for s in states]).astype(np.float32)
    masks = np.stack([s.legal_actions_mask() for s in states])
    players = [s.current_player() for s in states]
    np.testing.assert_allclose(fast.probs(info, masks, players), bp.probs(info, masks, players), atol=0.02)
    np.testing.assert_allclose(fast.values(info), bp.values(info), atol=0.02 * np.abs(bp.values(info)).max() + 1e-3)
    padded = np.zeros((16, T), np.float32)
    padded[:5] = info
    np.testing.assert_array_equal(_forward(fast.net, info), _forward(fast.net, padded)[:5])
    assert player.step(states[0]) in states[0].legal_actions()
    assert parse_search_spec("bf16=1,worlds=8") == {"bf16": True, "worlds": 8}
    with pytest.raises(ValueError, match="bf16 runs the blueprint's nets"):
        SearchPlayer(game, bf16=True)


def test_the_oracle_of_a_batched_search_plays_the_true_hands(monkeypatch):
    """oracle=hand in the halving schedule: every world the search plays
    holds both true hands and a reshuffled deck; endgame:D plays the true
    deal once the deck is that short; without an oracle the opponent's
    hand is redealt."""
    import agents.searcher as searcher
    from engine._lc_search import shuffle_decks
    game = engine.load_game("lost_cities", max_turns=200)
    state = game.new_initial_state(seed=5)
    rng = np.random.default_rng(5)
    for _ in range(20):
        state.apply_action(int(rng.choice(state.legal_actions())))
    me = state.current_player()
    K = 50
    hands = [np.asarray(state.information_state_tensor(p))[5:5 + K] for p in (0, 1)]
    dealt = []

    def spy(batch, seed, start, stop):
        shuffle_decks(batch, seed, start, stop)
        rows = [batch.state(i) for i in range(start, stop)]
        dealt.extend(rows)

    monkeypatch.setattr(searcher, "shuffle_decks", spy)
    spec = parse_search_spec("worlds=16,playout=random,schedule=halving,oracle=hand")
    assert spec["oracle"] == "hand"
    SearchPlayer(game, **spec).search(state)
    assert len(dealt) >= 16
    for world in dealt:
        for p in (0, 1):
            assert np.array_equal(np.asarray(world.information_state_tensor(p))[5:5 + K], hands[p])
    assert len({tuple(w.legal_actions()) for w in dealt}) == 1 and dealt[0].deck_size() == state.deck_size()
    # the deck is reshuffled: the next draws differ between worlds
    draws = set()
    for w in dealt:
        w.apply_action(w.legal_actions()[0])
        if not w.is_terminal() and w.current_player() == me:
            w.apply_action(2 * K)               # draw from the deck
        draws.add(tuple(np.asarray(w.information_state_tensor(me))[5:5 + K]))
    assert len(draws) > 1
    dealt.clear()
    late = SearchPlayer(game, worlds=16, playout="random", schedule="halving", oracle=f"endgame:{state.deck_size()}")
    late.search(state)
    assert late.redeal == "none" and not dealt
    plain = SearchPlayer(game, worlds=16, playout="random", schedule="halving")
    plain.search(state)
    assert plain.redeal == "all" and not dealt
    with pytest.raises(ValueError, match="not in a batch"):
        shuffle_decks(StateBatch(game, 2), 1, 1, 3)
    with pytest.raises(ValueError, match="plays lost_cities"):
        shuffle_decks(StateBatch(engine.load_game("kuhn_poker"), 1), 1)
