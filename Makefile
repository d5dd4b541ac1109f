# Two commands for a newcomer: `make demo` and `make test`. Everything installs from this repo's files.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
COMPAT := .venv-compat
COMPAT_PY := $(COMPAT)/bin/python
STAMP := $(VENV)/.installed
COMPAT_STAMP := $(COMPAT)/.installed

.PHONY: demo test lint unit integration beam compat proto proto-check bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,dev]'
	touch $@

# The published nominal-api-protos needs protobuf >= 7, which apache-beam forbids: the wire
# compatibility tests run here, importing only our generated modules (no Beam).
$(COMPAT_STAMP): tests/compat/requirements.txt
	test -x $(COMPAT_PY) || $(PYTHON) -m venv $(COMPAT)
	$(COMPAT_PY) -m pip install -q --upgrade pip
	$(COMPAT_PY) -m pip install -q -r tests/compat/requirements.txt
	touch $@

demo: $(STAMP)
	$(PY) -m pipelines.synthetic_telemetry --demo

lint: $(STAMP)
	$(VENV)/bin/ruff check beam_nominal pipelines tests benchmarks tools
	$(VENV)/bin/mypy beam_nominal
	$(PY) tools/gen_proto.py --check

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP)
	$(PY) -m pytest -q tests/integration

beam: $(STAMP)
	$(PY) -m pytest -q tests/beam

compat: $(COMPAT_STAMP)
	PYTHONPATH=$(CURDIR) $(COMPAT_PY) -m pytest -q -p no:cacheprovider tests/compat

test: lint $(COMPAT_STAMP)
	$(PY) -m pytest -q tests/unit tests/integration tests/beam
	PYTHONPATH=$(CURDIR) $(COMPAT_PY) -m pytest -q -p no:cacheprovider tests/compat

proto: $(STAMP)
	$(PY) tools/gen_proto.py

bench: $(STAMP)
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) $(COMPAT) .pytest_cache .mypy_cache .ruff_cache nominal-data
