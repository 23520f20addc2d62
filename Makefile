# The two entry points of README.md. Both create or reuse the local virtualenv
# (.venv), install netio (building its C extension) and its dependencies.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.netio-installed
DEMO_DIR ?= out/demo
SOURCES := pyproject.toml CMakeLists.txt $(wildcard native/*.c native/*.h) netio/_ffi_build.py

.PHONY: demo test lint install clean

install: $(STAMP)

$(STAMP): $(SOURCES)
	tools/bootstrap
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "scikit-build-core>=0.10" "cffi>=1.16"
	$(PY) -m pip install -q --no-build-isolation -e '.[test]'
	tools/link-pyverbs $(VENV)
	touch $(STAMP)

# netio-analyze exits 1 when it finds a PFC storm, which the demo scenario has.
demo: $(STAMP)
	$(PY) examples/write_into_numpy.py --backend soft
	$(VENV)/bin/netio scenario --preset demo $(DEMO_DIR)
	$(VENV)/bin/netio-analyze --plot $(DEMO_DIR)/plots $(DEMO_DIR)/*.pcap; test $$? -le 1

lint: $(STAMP)
	$(VENV)/bin/ruff check netio tests bench tools examples
	$(VENV)/bin/mypy --strict netio

test: lint
	$(PY) -m pytest

clean:
	rm -rf build out $(VENV)
