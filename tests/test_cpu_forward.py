"""The batcher's bf16 forward on a CPU: its rows padded to a multiple of 16
(one kernel a shape for oneDNN to keep), and bfloat16 weights cast once at
install instead of autocast casting them at every forward. Both must leave
every answer as it was: a row's answer never depends on the rows beside
it, and the bf16 answers are autocast's bit for bit."""
import copy
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import batcher_helpers as H  # noqa: E402
from batcher_helpers import ATOL, HIDDEN, LEDUC, forward, rows_of  # noqa: E402
from batcher.client import infer_blocking  # noqa: E402
from batcher.networks import MLP, AdvantageValue, for_inference, net_for_game, padded_rows  # noqa: E402


def autocast_answers(net, rows, pad_to=None):
    """net's answers to rows under bf16 autocast, on pad_to rows (zeros past rows) if given."""
    x = np.zeros((pad_to or len(rows), rows.shape[1]), np.float32)
    x[:len(rows)] = rows
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return net(torch.from_numpy(x))[:len(rows)].float().numpy()


def test_padded_rows_rounds_up_to_the_multiple():
    assert [padded_rows(n) for n in (0, 1, 15, 16, 17, 300, 512)] == [0, 16, 16, 16, 32, 304, 512]
    assert padded_rows(5, multiple=8) == 8


def test_for_inference_answers_as_autocast_does_bit_for_bit():
    torch.manual_seed(3)
    T = LEDUC.information_state_tensor_size()
    nets = [net_for_game(LEDUC, HIDDEN, seed=11),
            AdvantageValue(MLP(T, 3, (32, 16), input_scale=torch.rand(T) + 0.5),
                           MLP(T, 1, (24,), input_scale=torch.rand(T) + 0.5))]
    for net in nets:
        fast = for_inference(copy.deepcopy(net), torch.bfloat16)
        assert {p.dtype for p in fast.parameters()} == {torch.bfloat16}
        assert not fast.training
        for n in (1, 7, 64):
            rows = rows_of("float32", n, seed=n)
            with torch.no_grad():
                got = fast(torch.from_numpy(rows)).float().numpy()
            np.testing.assert_array_equal(got, autocast_answers(net, rows))
        plain = for_inference(copy.deepcopy(net))         # no dtype: float32, the same answers as net
        rows = rows_of("float32", 9, seed=1)
        np.testing.assert_array_equal(plain(torch.from_numpy(rows)).detach().numpy(),
                                      net(torch.from_numpy(rows)).detach().numpy())


def test_the_batcher_answers_a_short_batch_as_the_rows_alone_whatever_its_buffer_held():
    """A batch of 5 rows runs on 16 for a bf16 model (padded_rows); the
    spare rows of the staging buffer hold what an earlier, larger batch
    left there. Two
    different earlier batches give the same answers, bit for bit, and they
    are the net's own on those rows (bf16 model and float32 model)."""
    half = net_for_game(LEDUC, HIDDEN, seed=11)
    full = net_for_game(LEDUC, HIDDEN, seed=12)
    short = rows_of("float32", 5, seed=7)
    with H.InProcessBatcher({0: (full, 1)}) as srv:
        c = srv.client()
        c.push_weights(3, half, 1, autocast="bf16")
        got = {}
        for seed in (1, 2):                                 # two different earlier batches of 40 rows
            infer_blocking(c, 3, rows_of("float32", 40, seed=seed) * seed)
            _, got[3, seed] = infer_blocking(c, 3, short)
            infer_blocking(c, 0, rows_of("float32", 40, seed=seed) * seed)
            _, got[0, seed] = infer_blocking(c, 0, short)
        for mid in (3, 0):
            np.testing.assert_array_equal(got[mid, 1], got[mid, 2])
        np.testing.assert_array_equal(got[3, 1], autocast_answers(half, short, pad_to=padded_rows(5)))
        np.testing.assert_allclose(got[3, 1], autocast_answers(half, short), atol=1e-6, rtol=0)
        np.testing.assert_allclose(got[0, 1], forward(full, short), atol=ATOL, rtol=0)
        # the caller's net keeps its float32 weights: the batcher cast its own copy
        assert {p.dtype for p in half.parameters()} == {torch.float32}
    assert not srv.errors
