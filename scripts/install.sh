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
# The editable install is redone when this checkout is not the one installed
# into $PY, or when pyproject.toml (dependencies, test extras) changed since
# that install, as make would decide. Checked with -I (no current directory
# on sys.path), so that the checkout itself does not pass for an installed
# package.
installed_here() {
    "$PY" -I - "$(pwd)" <<'EOF'
import importlib.metadata as md, json, os, sys, urllib.parse, urllib.request
root = sys.argv[1]
try:
    dist = md.distribution("deepcfr-lostcities")
except md.PackageNotFoundError:
    sys.exit(1)
url = json.loads(dist.read_text("direct_url.json") or "{}")
path = urllib.request.url2pathname(urllib.parse.urlparse(url.get("url", "")).path)
if not (url.get("dir_info", {}).get("editable") and os.path.isdir(path) and os.path.samefile(path, root)):
    sys.exit(1)
metadata = [f.locate() for f in dist.files or () if f.name == "METADATA"]
newer = not metadata or os.path.getmtime(os.path.join(root, "pyproject.toml")) > os.path.getmtime(metadata[0])
sys.exit(1 if newer else 0)
EOF
}
if [ "${FORCE_INSTALL:-0}" = 1 ] || ! installed_here; then
    "$PY" -m pip install -q --no-build-isolation -e ".[test]"
fi
# incremental: recompiles only what changed
"$PY" setup.py -q build_ext --inplace
