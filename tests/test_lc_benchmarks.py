"""The Lost Cities studies (studies/) and the search's ceiling
(benchmarks.lc_ceiling) run end to end on tiny sizes (their figures are
their output, not tested here)."""
import json

import pytest

from studies import lc_imitation


def test_imitation_benchmark_scores_both_encodings(tmp_path, capsys):
    out = tmp_path / "imit.json"
    assert lc_imitation.main(["--games", "6", "--test-games", "2", "--steps", "3", "--batch-size", "16",
                              "--hidden", "8", "--match-games", "4", "--out", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert [r["features"] for r in results] == [0, 1]
    assert results[1]["tensor_size"] > results[0]["tensor_size"]
    for r in results:
        assert r["test_rows"] > 0 and 0.0 <= r["agreement"] <= 1.0
        for opponent in ("heuristic", "random"):
            assert r[opponent]["win_rate_lo"] <= r[opponent]["win_rate"] <= r[opponent]["win_rate_hi"]
    printed = capsys.readouterr().out
    assert "features=0 (312 entries)" in printed and "features=1" in printed


def test_imitation_benchmark_labels_once_with_a_cache(tmp_path):
    """--cache keeps the labelled rows: a second run with another net reads
    them back (the files are not rewritten) and scores the same decisions."""
    cache = tmp_path / "rows"
    common = ["--games", "4", "--test-games", "2", "--batch-size", "16", "--match-games", "2",
              "--features", "1", "--cache", str(cache)]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert lc_imitation.main(common + ["--steps", "2", "--hidden", "8", "--out", str(first)]) == 0
    files = sorted(cache.iterdir())
    assert [f.name for f in files] == ["test-2-f1-w0-x0.npz", "train-4-f1-w0-x0.npz"]
    stamps = [f.stat().st_mtime_ns for f in files]
    assert lc_imitation.main(common + ["--steps", "3", "--hidden", "12", "--weight-decay", "0.1", "--lr-decay",
                                       "--out", str(second)]) == 0
    assert [f.stat().st_mtime_ns for f in sorted(cache.iterdir())] == stamps
    a, b = (json.loads(p.read_text())["results"][0] for p in (first, second))
    assert a["train_rows"] == b["train_rows"] > 0 and a["test_rows"] == b["test_rows"] > 0


def test_augment_benchmark_times_both_ways(capsys):
    from studies import lc_augment
    assert lc_augment.main(["--games", "2", "--batch-size", "8", "--steps", "2", "--rounds", "1",
                            "--hidden", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rename_ms"] > 0 and out["rename_tensors_ms"] > 0 and out["device"] == "cpu"
    assert len(out["plain_ms"]) == len(out["renamed_ms"]) == 1


def test_losses_benchmark_pairs_each_game_with_its_mirror(capsys):
    """The heuristic as the agent plays the mirror's own games: every game's
    difference is its mirror's, each deal is won from exactly one seat (ties
    half each), and every loss is in a seat the mirror lost."""
    from studies import lc_losses
    assert lc_losses.main(["heuristic", "--deals", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["games"] == 40 and out["diffs"] == out["mirror"]
    assert out["deals_won"]["1"] == 1.0 and out["win_rate"] == 0.5
    assert out["losses_mirror_lost"] == 1.0 and out["losses"] > 0
    assert sum(b["games"] for b in out["by_mirror"]) == 40
    for b in out["by_mirror"]:
        if b["games"] and b["mirror_hi"] <= 0:
            assert b["win_rate"] == 0.0
        if b["games"] and b["mirror_lo"] > 0:
            assert b["win_rate"] == 1.0


def test_losses_benchmark_takes_the_search_player(capsys):
    from studies import lc_losses
    assert lc_losses.main(["search:heuristic,worlds=4", "--deals", "2"]) == 0
    printed = capsys.readouterr().out
    assert "search:heuristic,worlds=4 vs heuristic, 4 games on 2 deals (seed 777)" in printed
    assert "mirror diff from the seat" in printed


def test_ceiling_benchmark_plays_every_oracle_on_the_same_deals(capsys):
    from benchmarks import lc_ceiling
    assert lc_ceiling.main(["--oracles", "plain", "hand+endgame:3", "all", "--games", "4", "--worlds", "4",
                            "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["oracle"] for r in rows] == ["plain", "hand+endgame:3", "all"]
    assert all(r["games"] == 4 and r["decisions"] > 0 for r in rows)
    assert "oracle" not in rows[0]["player"] and "oracle=all" in rows[2]["player"]
    with pytest.raises(SystemExit):
        lc_ceiling.main(["--oracles", "endgame:-1"])
    assert "bad oracle 'endgame:-1'" in capsys.readouterr().err


def test_value_benchmark_trains_one_net_per_label_choice_and_plays_each_as_a_lookahead(tmp_path, capsys):
    from studies import lc_value
    cache = tmp_path / "games.npz"
    args = ["--games", "6", "--worlds", "4", "--steps", "50", "--hidden", "16", "--labels", "outcome", "both",
            "search", "--lookahead-games", "2", "--lookahead-worlds", "2", "--cache", str(cache), "--json"]
    assert lc_value.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["games"] == 6 and out["held_out_games"] == 1 and not out["cached"]
    outcome, both, search = out["nets"]
    assert [n["labels"] for n in out["nets"]] == ["outcome", "both", "search"]
    assert outcome["value_search_rows"] == 0 and both["value_search_rows"] > 0
    assert search["value_search_rows"] == search["value_train_rows"] == both["value_search_rows"]
    assert both["value_train_rows"] == outcome["value_train_rows"] + search["value_train_rows"]
    for net in (outcome, both, search):
        # the held-out errors of both kinds, whatever the net learned
        assert net["value_heldout_mse"] >= 0 and net["value_heldout_mean_mse"] > 0
        assert net["value_heldout_search_mse"] >= 0
        assert net["lookahead"]["games"] == 2
    assert lc_value.main(args) == 0 and json.loads(capsys.readouterr().out)["cached"]     # read back
    assert lc_value.main(["--games", "1"]) == 2


def test_label_rate_benchmark_labels_on_real_workers_the_rows_of_this_process(capsys):
    from benchmarks import label_rate
    assert label_rate.main(["--games", "4", "--worlds", "2", "--workers", "2", "--in-process", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows_equal"] and out["games"] == 4 and out["decisions"] > 4 and out["games_per_s"] > 0
    assert label_rate.main(["--workers", "0"]) == 2
