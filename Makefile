# The README's commands. `make lint` and `make test` are what CI runs (.ci/run).
#
# The interpreter: inside an active virtualenv or conda env, make uses it;
# otherwise it creates the project virtualenv $(VENV) with $(BASE_PYTHON) on
# first use (scripts/venv.sh; it reuses an installed torch) and uses that.
# Overrides: PYTHON=/path/to/python uses that interpreter as is;
# VENV=DIR puts the virtualenv elsewhere; VENV= (empty) uses python3 as is.
BASE_PYTHON ?= python3
VENV ?= .venv
ifeq ($(origin PYTHON),undefined)
  ifeq ($(strip $(VENV)),)
    PYTHON := $(BASE_PYTHON)
  else
    PYTHON := $(shell $(BASE_PYTHON) scripts/pick_python.py '$(VENV)')
    ifeq ($(PYTHON),)
      $(error $(BASE_PYTHON) did not run scripts/pick_python.py: install Python >= 3.10, or set PYTHON=/path/to/python)
    endif
  endif
endif
export PYTHON BASE_PYTHON
# test processes (pytest-xdist): many tests wait on real subprocesses and
# sockets, so two share a 2-core box well; TEST_JOBS=0 runs them in one process
TEST_JOBS ?= 2

.PHONY: install build debug annotate check-nogil lint test train bench clean which-python

# the project virtualenv, made once; every target that runs $(PYTHON) needs it
ifeq ($(PYTHON),$(abspath $(VENV))/bin/python)
$(PYTHON):
	bash scripts/venv.sh '$(abspath $(VENV))'
install build debug annotate: $(PYTHON)
endif

which-python:       ## print the interpreter make uses (creates nothing)
	@echo $(PYTHON)

install:            ## install deps + editable package, build extensions
	bash scripts/install.sh

build:              ## rebuild changed extensions in place
	$(PYTHON) setup.py -q build_ext --inplace

debug:              ## rebuild everything with bounds checks on (-O0 -g)
	DEEPCFR_DEBUG=1 $(PYTHON) setup.py -q build_ext --inplace --force

annotate:           ## write `cython -a` HTML for every extension (engine/*.html, traverser/*.html)
	DEEPCFR_ANNOTATE=1 $(PYTHON) setup.py -q build_ext --inplace --force
	@ls engine/*.html traverser/*.html 2>/dev/null || true

check-nogil: annotate  ## fail if any nogil function has a Python-touching line (cython -a)
	$(PYTHON) scripts/check_nogil.py

lint: install       ## the import layers (lint-imports, pyproject.toml), ruff's small rule set, and file lengths
	$(PYTHON) -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())'
	$(PYTHON) -m ruff check .
	$(PYTHON) scripts/check_sizes.py

test: install       ## run the test suite
	$(PYTHON) -m pytest -q -n $(TEST_JOBS)

train: install      ## the main job: ~10 min on 2 cores, an agent that beats HeuristicBot (configs/quick.yaml)
	$(PYTHON) -m trainer --config configs/quick.yaml

bench: install      ## engine benchmark
	$(PYTHON) -m engine.bench

clean:
	rm -rf build *.egg-info engine/*.c engine/*.so engine/*.html traverser/*.c traverser/*.so traverser/*.html
