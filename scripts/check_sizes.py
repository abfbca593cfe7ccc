"""Fail on files grown too long to read: a Python file over 600 lines, a
README.md (any, in any folder) over 250, a docs page (docs/**/*.md, the
studies' pages included) over 600.

    python scripts/check_sizes.py [ROOT]        # make lint runs it on the checkout

Prints each offender with its line count and limit, and exits 1 if there is
one. In a git checkout the files are git's (tracked, or untracked and not
ignored), so a virtualenv or build folder inside it is never read; elsewhere
every file under ROOT outside hidden folders and virtualenvs."""
import os
import subprocess
import sys
from pathlib import Path

PYTHON_MAX = 600
README_MAX = 250
DOC_MAX = 600


def limit_of(rel):
    """(limit, what) for a path relative to the root, or None if unchecked."""
    parts = rel.split("/")
    if parts[-1] == "README.md":
        return README_MAX, "a README"
    if rel.endswith(".py"):
        return PYTHON_MAX, "a Python file"
    if parts[0] == "docs" and rel.endswith(".md"):
        return DOC_MAX, "a docs page"
    return None


def files_of(root):
    """The files under `root` as paths relative to it, with '/' separators."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):         # no git, or not a checkout
        return sorted(_walk(root))
    names = {name for name in out.decode().split("\0") if name}
    return sorted(name for name in names if (Path(root) / name).is_file())


def _walk(root):
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"
                   and not (Path(folder) / d / "pyvenv.cfg").exists()]
        for name in names:
            yield Path(folder, name).relative_to(root).as_posix()


def line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def offenders(root):
    """[(relative path, lines, limit, what)] of every file over its limit."""
    out = []
    for rel in files_of(root):
        limit = limit_of(rel)
        if limit is None:
            continue
        lines = line_count(Path(root) / rel)
        if lines > limit[0]:
            out.append((rel, lines, *limit))
    return out


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else Path(__file__).resolve().parent.parent)
    if not root.is_dir():
        print(f"error: {root} is not a folder", file=sys.stderr)
        return 2
    found = offenders(root)
    for rel, lines, limit, what in found:
        print(f"{rel}: {lines} lines, over the {limit} of {what}")
    if found:
        print(f"check_sizes: {len(found)} file(s) too long (Python files and docs pages at most "
              f"{PYTHON_MAX} lines, README.md at most {README_MAX})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
