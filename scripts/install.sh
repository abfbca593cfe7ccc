#!/usr/bin/env bash
# Installs the project and its test tools into $PYTHON (default python3), then
# builds the Cython extensions in place. Safe to run again (it is what `make`
# runs, with PYTHON set to the interpreter scripts/pick_python.py chose,
# usually the project virtualenv .venv/bin/python).
# An existing torch (e.g. a CUDA build on a GPU box, seen through the
# virtualenv's --system-site-packages) is kept; without one, the CPU build
# torch==2.13.* is installed, never an unpinned (multi-GB CUDA) one.
set -euo pipefail
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    echo "error: $PY has no pip. If it is the project virtualenv, remove it (rm -rf .venv) and run make again;" >&2
    echo "  on Debian/Ubuntu the venv module needs: apt-get install python3-venv" >&2
    exit 1
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.*"
fi
"$PY" -m pip install -q "setuptools>=64" wheel "cython>=3.0" "numpy>=1.26"
# The editable install is redone only when this checkout is not the one
# installed into $PY, or a test tool is missing. Checked with -I (no current
# directory on sys.path), so that the checkout itself does not pass for an
# installed package.
installed_here() {
    "$PY" -I - "$(pwd)" <<'EOF'
import importlib.metadata as md, importlib.util, json, os, sys, urllib.parse, urllib.request
try:
    url = json.loads(md.distribution("deepcfr-lostcities").read_text("direct_url.json") or "{}")
except md.PackageNotFoundError:
    sys.exit(1)
path = urllib.request.url2pathname(urllib.parse.urlparse(url.get("url", "")).path)
editable = url.get("dir_info", {}).get("editable", False)
here = editable and os.path.isdir(path) and os.path.samefile(path, sys.argv[1])
tools = all(importlib.util.find_spec(m) for m in ("pytest", "hypothesis", "pyspiel"))
sys.exit(0 if here and tools else 1)
EOF
}
if [ "${FORCE_INSTALL:-0}" = 1 ] || ! installed_here; then
    "$PY" -m pip install -q --no-build-isolation -e ".[test]"
fi
# incremental: recompiles only what changed
"$PY" setup.py -q build_ext --inplace
