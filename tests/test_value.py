"""The learned value (issue 28, part 2): the value net served beside the
advantages by the batcher (batcher.networks.AdvantageValue), its targets
from the warm start's games (trainer.warmstart, trainer.value), the
hold-out by whole games, its training in a run, its checkpoints and the
config check. Real parts throughout: a real Batcher on loopback, real
self-play games of the engine, a real training run of configs/smoke.yaml."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import batcher_helpers as H  # noqa: E402
from batcher_helpers import ATOL, COLS, HIDDEN, LEDUC, forward, leduc_nets, rows_of  # noqa: E402
from batcher.client import infer_blocking  # noqa: E402
from batcher.networks import MLP, AdvantageValue, build_mlp  # noqa: E402
from batcher.weights import net_from_bytes, net_to_bytes, spec_params  # noqa: E402

torch.set_num_threads(1)


def _advantage_value(seed=0, value_hidden=(8, 4)):
    torch.manual_seed(seed)
    adv = MLP(COLS, LEDUC.num_distinct_actions(), HIDDEN, input_scale=LEDUC.input_scale())
    value = MLP(COLS, 1, value_hidden, input_scale=LEDUC.input_scale())
    return AdvantageValue(adv, value)


# ---------------------------------------------------------------------------
# 1. the network and its weights
def test_advantage_value_spec_params_and_bytes_round_trip():
    net = _advantage_value()
    A = LEDUC.num_distinct_actions()
    spec = net.spec()
    assert spec == {"input_size": COLS, "num_actions": A + 1, "hidden": list(HIDDEN), "value_hidden": [8, 4]}
    assert spec_params(spec) == sum(p.numel() for p in net.parameters())
    assert isinstance(build_mlp(spec), AdvantageValue)
    assert isinstance(build_mlp(net.adv.spec()), MLP)
    rows = rows_of("float32", 9, seed=1)
    out = forward(net, rows)
    assert out.shape == (9, A + 1)
    np.testing.assert_array_equal(out[:, :A], forward(net.adv, rows))
    np.testing.assert_array_equal(out[:, A:], forward(net.value, rows))
    again = net_from_bytes(*net_to_bytes(net))
    assert isinstance(again, AdvantageValue) and again.spec() == spec
    np.testing.assert_array_equal(forward(again, rows), out)
    with pytest.raises(ValueError, match="one output"):
        AdvantageValue(net.adv, MLP(COLS, 2, (4,)))
    with pytest.raises(ValueError, match="num_actions"):
        spec_params({**spec, "num_actions": 1})
    with pytest.raises(ValueError, match="bad network spec"):
        spec_params({**spec, "value_hidden": [0]})


def test_batcher_answers_advantages_and_value_in_one_forward():
    nets = leduc_nets()
    A = LEDUC.num_distinct_actions()
    with H.InProcessBatcher({0: (nets[0], 1), 1: (nets[1], 1)}, max_wait_us=0) as srv:
        c = srv.client()
        net = _advantage_value(seed=3)
        assert c.push_weights(0, net, 2)["version"] == 2
        rows = rows_of("uint8", 13, seed=4)
        before = c.stats()
        head, answer = infer_blocking(c, 0, rows)
        after = c.stats()
        assert head["version"] == 2
        assert answer.shape == (13, A + 1)
        np.testing.assert_allclose(answer[:, :A], forward(net.adv, rows), atol=ATOL, rtol=0)
        np.testing.assert_allclose(answer[:, A], forward(net.value, rows)[:, 0], atol=ATOL, rtol=0)
        assert after["forwards"] - before["forwards"] == 1           # both nets in one forward
        assert after["per_model"]["0"]["forwards"] - before["per_model"].get("0", {}).get("forwards", 0) == 1
        head, answer = infer_blocking(c, 1, rows)                     # model 1: a plain MLP, A columns
        assert answer.shape == (13, A)
    assert not srv.errors
