# peanut-py: `make demo` and `make test` each start from a fresh clone (they create .venv themselves).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PY      = $(BIN)/python
DEMO    = .demo
EXAMPLE = index/example

.PHONY: install cpu-device oclgrind demo test docs bench bench-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=64" wheel

# Editable install with the CPU OpenCL device (PoCL) from PyPI, so a laptop without vendor drivers works.
install: $(BIN)/python
	$(PY) -m pip install -q "cython>=3.0" "numpy>=1.24"
	$(PY) -m pip install -q --no-build-isolation -e '.[pocl,test]'
	@$(BIN)/peanut devices --check || $(MAKE) --no-print-directory cpu-device

# PyPI's PoCL (LLVM 14) cannot compile for CPUs newer than its LLVM knows (e.g. AMD Zen 5); Debian's can.
cpu-device:
	@echo "peanut: the PyPI CPU OpenCL device does not work on this CPU; installing Debian's pocl-opencl-icd"
	@SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q pocl-opencl-icd >/dev/null || { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q pocl-opencl-icd >/dev/null; }
	$(BIN)/peanut devices --check

demo: install
	@mkdir -p $(DEMO)
	$(BIN)/peanut devices
	$(BIN)/peanut index $(EXAMPLE)/chr20_slice.fa.gz -o $(DEMO)/chr20_slice.peanut.h5
	$(BIN)/peanut info $(DEMO)/chr20_slice.peanut.h5
	$(BIN)/peanut map -t 2 $(DEMO)/chr20_slice.peanut.h5 $(EXAMPLE)/NA12878_chr20_slice_2000pairs_R1.fastq.gz -o $(DEMO)/demo.sam
	$(PY) $(EXAMPLE)/summarize.py $(DEMO)/demo.sam $(EXAMPLE)/original_positions.tsv.gz

# Oclgrind, the simulated OpenCL device that tests/test_oclgrind.py runs the kernels on (Debian/Ubuntu package),
# installed where that needs no password: as root, or with sudo that does not ask (sudo -n). Elsewhere the
# test is skipped with the install command as its reason.
oclgrind:
	@command -v oclgrind >/dev/null || ! command -v apt-get >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else \
	    echo "peanut: oclgrind not installed and apt-get needs a password; tests/test_oclgrind.py will be skipped"; exit 0; fi; \
	  $$SUDO apt-get install -y -q oclgrind >/dev/null 2>&1 || { $$SUDO apt-get update -q >/dev/null 2>&1 && \
	    $$SUDO apt-get install -y -q oclgrind >/dev/null 2>&1; } || \
	    echo "peanut: apt-get could not install oclgrind; tests/test_oclgrind.py will be skipped"; }

test: install oclgrind
	$(BIN)/pytest tests --durations=15

docs: install
	$(PY) -m pip install -q mkdocs
	$(BIN)/mkdocs build -q

bench: install
	$(PY) benchmarks/run.py

bench-quick: install
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) $(DEMO) build *.egg-info peanut_py/*.so peanut_py/*.c site
