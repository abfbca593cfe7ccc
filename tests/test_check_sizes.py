"""scripts/check_sizes.py, make lint's guard on file lengths, run as make
runs it on a tree of files at and over each limit."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_sizes.py"


def _write(root, rel, lines):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"line {i}\n" for i in range(lines)))


def _check(root):
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=60)


def test_names_each_file_over_its_limit_with_its_line_count(tmp_path):
    over = {"pkg/long.py": 601, "README.md": 251, "docs/studies/README.md": 251, "docs/long.md": 601,
            "docs/studies/2026-01-01-long.md": 601}
    within = {"pkg/ok.py": 600, "pkg/README.md": 250, "docs/ok.md": 600, "notes/long.md": 900,
              "pkg/data.txt": 5000, ".venv/lib/big.py": 900}
    for rel, n in {**over, **within}.items():
        _write(tmp_path, rel, n)
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    venv = tmp_path / "env"                 # a virtualenv under another name is skipped too
    _write(venv, "lib/site.py", 900)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    r = _check(tmp_path)
    assert r.returncode == 1
    named = sorted(line.split(":")[0] for line in r.stdout.splitlines())
    assert named == sorted(over)
    assert "pkg/long.py: 601 lines, over the 600 of a Python file" in r.stdout
    assert "README.md: 251 lines, over the 250 of a README" in r.stdout.splitlines()
    assert "docs/studies/2026-01-01-long.md: 601 lines, over the 600 of a docs page" in r.stdout
    assert "5 file(s) too long" in r.stderr


def test_passes_a_tree_within_its_limits(tmp_path):
    for rel, n in {"pkg/ok.py": 600, "README.md": 250, "docs/studies/README.md": 250, "docs/ok.md": 600}.items():
        _write(tmp_path, rel, n)
    r = _check(tmp_path)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == ""


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_reads_a_checkouts_files_as_git_lists_them(tmp_path):
    """In a git checkout, ignored files (a build, a virtualenv) are not read;
    untracked files that are not ignored are."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("build/\n")
    _write(tmp_path, "build/generated.py", 900)
    _write(tmp_path, "new.py", 700)
    r = _check(tmp_path)
    assert r.returncode == 1 and r.stdout.splitlines() == ["new.py: 700 lines, over the 600 of a Python file"]
    assert _check(tmp_path / "no-such-folder").returncode == 2
