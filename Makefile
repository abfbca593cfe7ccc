# The README's commands. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
export PYTHON

.PHONY: install build debug annotate check-nogil test train bench clean

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

test: install       ## run the test suite
	$(PYTHON) -m pytest -q

train: install      ## the main job
	$(PYTHON) -m trainer --config configs/smoke.yaml

bench: install      ## engine benchmark
	$(PYTHON) -m engine.bench

clean:
	rm -rf build *.egg-info engine/*.c engine/*.so engine/*.html traverser/*.c traverser/*.so traverser/*.html
