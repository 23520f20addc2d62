# The two entry points of README.md. Both create or reuse the local virtualenv
# (.venv), install netio (building its C extension) and its dependencies.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.netio-installed
DEMO_DIR ?= out/demo
SOURCES := pyproject.toml CMakeLists.txt $(wildcard native/*.c native/*.h native/verbs/*.c native/verbs/*.h) \
           netio/_ffi_build.py netio/_verbs_ffi_build.py

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

# The whole story on one machine, no RDMA hardware: move data with the IO API (soft
# RoCEv2), measure the link with netio bench into a fabric profile, calibrate a cluster
# model from it, generate and analyse a fabric's captures (netio-analyze exits 1 when it
# finds a PFC storm, which the demo scenario has), and ask what that congestion costs a
# training step.
demo: $(STAMP)
	$(PY) examples/write_into_numpy.py --backend soft
	mkdir -p $(DEMO_DIR)
	$(VENV)/bin/netio bench --backend soft --listen 127.0.0.1:18699 & \
	  $(VENV)/bin/netio bench --backend soft --local-addr 127.0.0.2 -n 8 \
	    --profile $(DEMO_DIR)/link.json 127.0.0.1:18699; code=$$?; wait; exit $$code
	$(VENV)/bin/netio-model calibrate $(DEMO_DIR)/link.json --system dgx-h100 \
	  --output $(DEMO_DIR)/cluster.json
	$(VENV)/bin/netio scenario --preset demo $(DEMO_DIR)
	$(VENV)/bin/netio-analyze --plot $(DEMO_DIR)/plots $(DEMO_DIR)/*.pcap; test $$? -le 1
	$(VENV)/bin/netio-analyze --json $(DEMO_DIR)/*.pcap > $(DEMO_DIR)/report.json; test $$? -le 1
	$(VENV)/bin/netio-model train $(DEMO_DIR)/cluster.json llama3-70b llama3-70b-64gpu \
	  --conditions $(DEMO_DIR)/report.json

lint: $(STAMP)
	$(VENV)/bin/ruff check netio tests bench tools examples
	$(VENV)/bin/mypy --strict netio

test: lint
	$(PY) -m pytest

clean:
	rm -rf build out $(VENV)
