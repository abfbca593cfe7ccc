"""Which interpreter `make` installs into and runs: `python3 scripts/pick_python.py VENV_DIR`.

Run by the base interpreter (the Makefile's BASE_PYTHON, `python3`). Prints
one line:
  - the active virtualenv's interpreter when VIRTUAL_ENV is set, or when this
    interpreter is itself a virtualenv's (False);
  - this interpreter when it belongs to a conda env (a `conda-meta` directory
    in its prefix, or CONDA_PREFIX set), e.g. the CUDA PyTorch Docker image;
  - otherwise VENV_DIR/bin/python, the project virtualenv, which the Makefile
    creates with scripts/venv.sh on first use. A system Python (externally
    managed on Debian and Ubuntu, PEP 668) is never installed into.
Creates and installs nothing itself.
"""
import os
import sys


def pick(venv_dir):
    active = os.environ.get("VIRTUAL_ENV")
    if active and os.path.exists(os.path.join(active, "bin", "python")):
        return os.path.join(active, "bin", "python")
    if sys.prefix != sys.base_prefix:
        return sys.executable
    if os.path.isdir(os.path.join(sys.prefix, "conda-meta")) or os.environ.get("CONDA_PREFIX"):
        return sys.executable
    return os.path.join(os.path.abspath(venv_dir), "bin", "python")


if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1]:
        sys.exit("usage: python3 scripts/pick_python.py VENV_DIR")
    print(pick(sys.argv[1]))
