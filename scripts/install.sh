#!/usr/bin/env bash
# Installs the project and its test tools into the current Python, then builds
# the Cython extensions in place. Safe to run again (it is what `make` runs).
# An existing torch (e.g. a CUDA build on a GPU box) is kept; without one, the
# CPU build torch==2.13.* is installed, never an unpinned (multi-GB CUDA) one.
set -euo pipefail
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.*"
fi
"$PY" -m pip install -q "setuptools>=64" wheel "cython>=3.0" "numpy>=1.26"
if ! "$PY" -c "import engine._game, sys; sys.exit(0 if engine.__file__.startswith('$(pwd)') else 1)" 2>/dev/null \
        || [ "${FORCE_INSTALL:-0}" = 1 ]; then
    "$PY" -m pip install -q --no-build-isolation -e ".[test]"
fi
# incremental: recompiles only what changed
"$PY" setup.py -q build_ext --inplace
