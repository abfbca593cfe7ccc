"""The Lost Cities learning benchmarks run end to end on tiny sizes (their
figures are benchmark output, not tested here)."""
import json

from benchmarks import lc_imitation


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
