#!/usr/bin/env bash
# Creates the project virtualenv: `bash scripts/venv.sh DIR` (the Makefile runs
# it when DIR/bin/python is missing; scripts/pick_python.py says when).
# The base interpreter is $BASE_PYTHON (default python3). When it already has
# torch (a system or site CUDA build on a GPU box), the virtualenv
# sees its site-packages (--system-site-packages), so that torch is reused
# rather than replaced by the CPU wheel. Pip inside the virtualenv reads the
# same pip config files (/etc, ~/.config/pip) and PIP_* variables as outside.
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: bash scripts/venv.sh DIR" >&2
    exit 2
fi
DIR=$1
BASE=${BASE_PYTHON:-python3}
if ! command -v "$BASE" >/dev/null 2>&1; then
    echo "error: base interpreter '$BASE' not found (set BASE_PYTHON, or PYTHON to use an interpreter as is)" >&2
    exit 1
fi
flags=()
# found, not imported: importing a CUDA torch takes seconds
if torch_version=$("$BASE" - 2>/dev/null <<'EOF'
import importlib.metadata, importlib.util, sys
if importlib.util.find_spec("torch") is None:
    sys.exit(1)
try:
    print(importlib.metadata.version("torch"))
except importlib.metadata.PackageNotFoundError:
    print("(version unknown)")
EOF
); then
    flags+=(--system-site-packages)
    echo "creating $DIR with $BASE, reusing its torch $torch_version (--system-site-packages)"
else
    echo "creating $DIR with $BASE"
fi
# an interrupted or failed creation leaves no half-made virtualenv behind
# (make would take DIR/bin/python for a finished one)
if [ ! -e "$DIR" ]; then
    trap 'rm -rf "$DIR"' EXIT
    trap 'rm -rf "$DIR"; exit 130' INT TERM
fi
if ! "$BASE" -m venv "${flags[@]}" "$DIR"; then
    echo "error: could not create the virtualenv $DIR with $BASE." >&2
    echo "  On Debian/Ubuntu install the venv module: apt-get install python3-venv" >&2
    echo "  Or use an existing interpreter as is: make ... PYTHON=/path/to/python" >&2
    exit 1
fi
trap - EXIT INT TERM
