# peanut-py: `make demo` and `make test` each start from a fresh clone (they create .venv themselves).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PY      = $(BIN)/python
DEMO    = .demo
EXAMPLE = index/example
# Installed again only when one of these changes (the Cython extensions are built at install time).
SOURCES = setup.py pyproject.toml $(wildcard peanut_py/*.pyx peanut_py/*.pxd)
POCL_INSTALL = apt-get install -y -q pocl-opencl-icd

.PHONY: install cpu-device oclgrind demo test docs bench bench-quick clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=64" wheel

# Editable install with the CPU OpenCL device (PoCL) from PyPI, so a laptop without vendor drivers works.
$(VENV)/.installed: $(SOURCES) | $(BIN)/python
	$(PY) -m pip install -q "cython>=3.0" "numpy>=1.24"
	$(PY) -m pip install -q --no-build-isolation -e '.[pocl,test]'
	@$(BIN)/peanut devices --check || $(MAKE) --no-print-directory cpu-device
	@touch $@

install: $(VENV)/.installed

# PyPI's PoCL (LLVM 14) cannot compile for CPUs newer than its LLVM knows (e.g. AMD Zen 5); Debian's can.
# As root it installs; otherwise it asks before using sudo, and without a terminal (or under CI) it only
# prints the command.
cpu-device:
	@echo "peanut: the PyPI CPU OpenCL device does not work on this CPU; Debian's pocl-opencl-icd does"
	@if [ "$$(id -u)" = 0 ]; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  $(POCL_INSTALL) >/dev/null || { apt-get update -q >/dev/null && $(POCL_INSTALL) >/dev/null; }; \
	elif [ -t 0 ] && [ -z "$$CI" ]; then \
	  printf 'Run "sudo %s" now? [y/N] ' "$(POCL_INSTALL)"; read answer; \
	  case "$$answer" in [yY]*) sudo $(POCL_INSTALL) >/dev/null || { sudo apt-get update -q >/dev/null && sudo $(POCL_INSTALL) >/dev/null; } ;; \
	    *) echo "Install it with: sudo $(POCL_INSTALL), then run make again"; exit 1 ;; esac; \
	else \
	  echo "Install it with: sudo $(POCL_INSTALL), then run make again"; exit 1; \
	fi
	$(BIN)/peanut devices --check

demo: install
	@mkdir -p $(DEMO)
	$(BIN)/peanut devices
	$(BIN)/peanut index --quiet $(EXAMPLE)/chr20_slice.fa.gz -o $(DEMO)/chr20_slice.peanut.h5
	$(BIN)/peanut map -t 2 $(DEMO)/chr20_slice.peanut.h5 $(EXAMPLE)/NA12878_chr20_slice_2000pairs_R1.fastq.gz \
	  $(EXAMPLE)/NA12878_chr20_slice_2000pairs_R2.fastq.gz -o $(DEMO)/demo.bam
	$(PY) $(EXAMPLE)/summarize.py $(DEMO)/demo.bam $(EXAMPLE)/original_positions.tsv.gz
	@echo
	@echo "To map your own data:"
	@echo "  . $(BIN)/activate                                   # puts peanut on PATH (or: pip install --user .)"
	@echo "  peanut index ref.fa.gz                              # once per reference: ref.fa.gz.peanut.h5"
	@echo "  peanut map -t 8 ref.fa.gz.peanut.h5 r1.fq.gz r2.fq.gz -o out.bam"
	@echo "Documentation: docs/index.md, or make docs and open site/index.html"

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

$(BIN)/mkdocs: | $(BIN)/python
	$(PY) -m pip install -q mkdocs

docs: $(BIN)/mkdocs
	$(BIN)/mkdocs build --strict -q

bench: install
	$(PY) benchmarks/run.py

bench-quick: install
	$(PY) benchmarks/run.py --quick

clean:
	rm -rf $(VENV) $(DEMO) build *.egg-info peanut_py/*.so peanut_py/*.c site
