# The two commands of the README: `make demo` and `make test`. Nothing needed beforehand but Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
PIP_FLAGS ?= -q --disable-pip-version-check
PYTEST_ARGS ?=

CHROMIUM ?= /usr/bin/chromium

.PHONY: install demo test test-fast bench clean chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install $(PIP_FLAGS) --upgrade pip
	$(BIN)/pip install $(PIP_FLAGS) -c constraints.txt -e ".[tf,test]"
	touch $@

install: $(VENV)/.installed

## convert the bundled LeRobot v3.0 example to RLDS, validate it, print where it is and how to load it
demo: install
	$(BIN)/robo-ray demo demo_output

## the report's browser test renders report.html in Debian's chromium: installed when missing and root, else one line
chromium:
	@test -x $(CHROMIUM) || { test "$$(id -u)" = 0 && apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -qq chromium >/dev/null && test -x $(CHROMIUM); } || { echo "error: $(CHROMIUM) is \
	missing and could not be installed (needs root and apt): run 'apt-get install -y chromium' as root" >&2; exit 1; }

## the whole test suite (unit + integration on a real local Ray, real PyAV, real tfds, headless chromium)
test: install chromium
	ROBO_RAY_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -n 2 --dist loadgroup --durations=40 $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest -n 2 -m "not slow" $(PYTEST_ARGS)

bench: install
	$(BIN)/python -m bench.scaling

clean:
	rm -rf demo_output .pytest_cache build dist *.egg-info
