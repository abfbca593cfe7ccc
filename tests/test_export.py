"""agents.export: an agent in one small file (the strategy net and the
critic) that every command taking a checkpoint plays as the run did."""
import subprocess
import sys

import numpy as np
import pytest
import torch

from lc_helpers import ROOT, save_small_run

from agents.checkpoint import build_critic, load_checkpoint  # noqa: E402
from agents.export import export  # noqa: E402
from agents.head_to_head import load_side  # noqa: E402
from agents.policy import load_policy  # noqa: E402

SMALL = dict(colours=3, ranks=5, hand_size=4, max_turns=60)


def _states(game, n=12, seed=0):
    """States along a game of random legal moves."""
    rng = np.random.default_rng(seed)
    state, out = game.new_initial_state(seed=seed), []
    while not state.is_terminal() and len(out) < n:
        out.append(state.clone())
        state.apply_action(int(rng.choice(state.legal_actions())))
    return out


@pytest.mark.parametrize("critic", [True, False])
def test_the_exported_agent_plays_and_values_as_the_run_did(tmp_path, critic):
    path, game, nets, c = save_small_run(tmp_path / "run", SMALL, critic=critic)
    out, kept, params = export(tmp_path / "run", tmp_path / "agent.pt", note="seed 1")
    ckpt = load_checkpoint(out)
    assert list(ckpt["nets"]) == ["strategy"] and ("critic" in ckpt) == critic
    assert kept == ["the strategy net"] + (["the critic"] if critic else [])
    assert params == sum(p.numel() for p in nets["strategy"].parameters()) + (
        sum(p.numel() for p in c.parameters()) if critic else 0)
    assert ckpt["exported_from"]["note"] == "seed 1" and ckpt["exported_from"]["checkpoint"] == str(path)
    assert out.stat().st_size < path.stat().st_size
    run, agent = load_policy(tmp_path / "run"), load_policy(out)
    for s in _states(game):
        assert run.action_probs(s) == agent.action_probs(s)
    if critic:
        x = np.stack([s.information_state_tensor(s.current_player()) for s in _states(game)])
        assert np.array_equal(agent.values(x), run.values(x)) and np.abs(agent.values(x)).max() > 0
        with torch.no_grad():
            assert torch.equal(build_critic(ckpt)(torch.from_numpy(x).float()), c.eval()(torch.from_numpy(x).float()))
    side = load_side(f"run:{out}:average-greedy", game)      # agents.evaluate's and head_to_head's spec
    first = _states(game)[0]
    assert side.greedy and side.action_probs(first) == agent.action_probs(first)


def test_an_exported_agent_refuses_the_policies_that_need_the_advantage_nets(tmp_path):
    save_small_run(tmp_path / "run", SMALL)
    out, _, _ = export(tmp_path / "run", tmp_path / "agent.pt")
    with pytest.raises(ValueError, match="holds no adv0 net .*exported agent"):
        load_policy(out, "current")
    again, _, _ = export(out, tmp_path / "again.pt", note="copy")         # an export exports as it is
    origin = load_checkpoint(again)["exported_from"]
    assert origin["note"] == "copy" and origin["earlier"]["checkpoint"].endswith("iter_000001.pt")


def test_the_command_writes_the_file_and_names_a_missing_source(tmp_path):
    save_small_run(tmp_path / "run", SMALL)
    ok = subprocess.run([sys.executable, "-m", "agents.export", str(tmp_path / "run"), str(tmp_path / "a.pt")],
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "the strategy net and the critic" in ok.stdout and (tmp_path / "a.pt").exists()
    bad = subprocess.run([sys.executable, "-m", "agents.export", str(tmp_path / "none"), str(tmp_path / "b.pt")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no checkpoint at" in bad.stderr and not (tmp_path / "b.pt").exists()
    (tmp_path / "plain").write_text("a file, not a folder")
    nowhere = subprocess.run([sys.executable, "-m", "agents.export", str(tmp_path / "run"),
                              str(tmp_path / "plain" / "c.pt")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert nowhere.returncode == 2 and "cannot" in nowhere.stderr and "Traceback" not in nowhere.stderr


@pytest.mark.parametrize("path", sorted((ROOT / "references").glob("*.pt")), ids=lambda p: p.name)
def test_every_committed_reference_is_listed_loads_and_beats_random_play(path):
    """references/: each file is named in its README, loads with the code as
    it stands, and its greedy agent beats uniform random play by a wide
    margin (the trained agents win by about 180 points a game), its critic
    where one was kept answering finite values."""
    from engine.match import run_match
    assert f"`{path.name}`" in (ROOT / "references" / "README.md").read_text()
    agent = load_policy(path, "average-greedy")      # an illegal move would stop the game with an error
    result = run_match(agent.game, agent, "random", 4, progress=False)
    assert result["mean_score_diff"] > 100, result
    if agent.critic is not None:
        x = np.stack([s.information_state_tensor(s.current_player()) for s in _states(agent.game)])
        assert np.isfinite(agent.values(x)).all()
