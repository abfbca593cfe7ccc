"""The symmetric read-out (agents.policy.SymmetricPolicy): the strategy net
averaged over every renaming of Lost Cities' colours, checked against the
average computed renaming by renaming with the engine's own encodings, and
colour-blind where the net is not."""
import itertools

import numpy as np
import pytest

import engine
from agents.policy import AveragePolicy, SymmetricPolicy, parse_kind
from agents.symmetry import action_map, colour_maps
from batcher.networks import net_for_game
from lc_helpers import SMALL


def _decisions(game, n, seed):
    rng = np.random.default_rng(seed)
    states, g = [], 0
    while len(states) < n:
        s = game.new_initial_state(seed=seed * 100 + g)
        g += 1
        for _ in range(int(rng.integers(0, 40))):
            if s.is_terminal():
                break
            s.apply_action(int(rng.choice(s.legal_actions())))
        if not s.is_terminal():
            states.append(s)
    info = np.array([s.information_state_tensor(s.current_player()) for s in states], np.float32)
    mask = np.array([s.legal_actions_mask() for s in states], bool)
    return states, info, mask, np.array([s.current_player() for s in states])


def test_the_symmetric_policy_is_the_mean_over_the_renamings_and_is_colour_blind():
    game = engine.load_game("lost_cities", **SMALL)           # 3 colours: 6 renamings
    net = net_for_game(game, hidden=(32,), seed=4)
    plain, sym = AveragePolicy(net), SymmetricPolicy(net, game)
    _, info, mask, players = _decisions(game, 30, seed=2)
    got = sym.probs(info, mask, players)
    want = np.zeros_like(got)
    perms = list(itertools.permutations(range(3)))
    for perm in perms:
        isrc, asrc = colour_maps(game, perm)
        want += plain.probs(info[:, isrc], mask[:, asrc], players)[:, action_map(asrc)] / len(perms)
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert np.all(got[~mask] == 0) and np.allclose(got.sum(axis=1), 1)
    # colour-blind: the renamed decision gets the renamed probabilities; the plain net's do not
    isrc, asrc = colour_maps(game, (2, 0, 1))
    renamed = sym.probs(info[:, isrc], mask[:, asrc], players)[:, action_map(asrc)]
    np.testing.assert_allclose(renamed, got, atol=1e-9)
    plain_renamed = plain.probs(info[:, isrc], mask[:, asrc], players)[:, action_map(asrc)]
    assert np.abs(plain_renamed - plain.probs(info, mask, players)).max() > 1e-3


def test_the_symmetric_policy_splits_large_batches_and_plays(monkeypatch):
    game = engine.load_game("lost_cities", **SMALL)
    net = net_for_game(game, hidden=(16,), seed=1)
    states, info, mask, players = _decisions(game, 25, seed=5)
    whole = SymmetricPolicy(net, game).probs(info, mask, players)
    monkeypatch.setattr(SymmetricPolicy, "ROWS", 12)           # two decisions a forward
    np.testing.assert_allclose(SymmetricPolicy(net, game).probs(info, mask, players), whole, atol=1e-12)
    greedy = SymmetricPolicy(net, game, greedy=True)
    for s, p in zip(states, whole):
        assert greedy.step(s) == int(np.argmax(p)) and greedy.step(s) in s.legal_actions()
    assert greedy.name == "symmetric-greedy" and parse_kind("symmetric-greedy") == ("symmetric", True)


def test_a_game_without_colours_has_no_symmetric_read_out():
    game = engine.load_game("leduc_poker")
    with pytest.raises(ValueError, match="renames Lost Cities' colours; leduc_poker has none"):
        SymmetricPolicy(net_for_game(game, hidden=(8,)), game)


def test_the_symmetrize_study_fine_tunes_the_net_toward_its_symmetric_read_out(tmp_path, capsys):
    import json

    import torch

    from agents.checkpoint import load_checkpoint
    from studies.lc_symmetrize import main
    from trainer.checkpoint import save_checkpoint
    params = dict(SMALL)
    game = engine.load_game("lost_cities", **params)
    nets = {k: net_for_game(game, hidden=(16,), seed=i) for i, k in enumerate(("strategy", "adv0", "adv1"))}
    path = save_checkpoint(tmp_path / "run", 1, {
        "config": {"game": {"name": "lost_cities", "params": params}, "traversal": {"fallback": "uniform"}},
        "nets": {k: n.state_dict() for k, n in nets.items()}, "net_spec": nets["strategy"].spec()})
    out = tmp_path / "sym.pt"
    main([str(path), "--out", str(out), "--games", "8", "--epochs", "20", "--batch", "64", "--lr", "3e-3"])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["decisions"] > 8 and line["greedy_differs_after"] < line["greedy_differs_before"]
    before, after = load_checkpoint(path), load_checkpoint(out)
    assert after["symmetrized"]["from"] == str(path)
    for name in ("adv0", "adv1"):
        for k, v in before["nets"][name].items():
            assert torch.equal(v, after["nets"][name][k])
    assert any(not torch.equal(v, after["nets"]["strategy"][k]) for k, v in before["nets"]["strategy"].items())
    with pytest.raises(SystemExit):
        main([str(path), "--out", str(out), "--games", "0"])
