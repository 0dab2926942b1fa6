# peanut-py: `make demo` and `make test` each start from a fresh clone (they create .venv themselves).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PY      = $(BIN)/python
DEMO    = .demo
EXAMPLE = index/example

.PHONY: install demo test docs bench bench-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=64" wheel

# Editable install with the CPU OpenCL device (PoCL) from PyPI, so a laptop without vendor drivers works.
install: $(BIN)/python
	$(PY) -m pip install -q "cython>=3.0" "numpy>=1.24"
	$(PY) -m pip install -q --no-build-isolation -e '.[pocl,test]'

demo: install
	@mkdir -p $(DEMO)
	$(BIN)/peanut devices
	$(BIN)/peanut index $(EXAMPLE)/chr20_slice.fa.gz -o $(DEMO)/chr20_slice.peanut.h5
	$(BIN)/peanut info $(DEMO)/chr20_slice.peanut.h5

test: install
	$(BIN)/pytest tests

docs: install
	$(PY) -m pip install -q mkdocs
	$(BIN)/mkdocs build -q -d docs/_build

bench: install
	$(PY) benchmarks/run.py

bench-quick: install
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) $(DEMO) build *.egg-info peanut_py/*.so peanut_py/*.c docs/_build
