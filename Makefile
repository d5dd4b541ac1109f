# Two commands for a newcomer: `make demo` and `make test`. Everything installs from this repo's files.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
COMPAT := .venv-compat
COMPAT_PY := $(COMPAT)/bin/python
STAMP := $(VENV)/.installed
COMPAT_STAMP := $(COMPAT)/.installed
BEAM_MIN := .venv-beam-min
BEAM_MIN_PY := $(BEAM_MIN)/bin/python
BEAM_MIN_STAMP := $(BEAM_MIN)/.installed

.PHONY: demo test lint unit integration beam pure engines engines-fetch beam-min compat proto proto-check bench clean

$(STAMP): pyproject.toml setup.py beam_nominal/_pipeline/_fastpath.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	BEAM_NOMINAL_COMPILE=1 $(PY) -m pip install -q -e '.[test,dev,plot]'
	touch $@

# The published nominal-api-protos needs protobuf >= 7, which apache-beam forbids: the wire
# compatibility tests run here, importing only our generated modules (no Beam).
$(COMPAT_STAMP): tests/compat/requirements.txt
	test -x $(COMPAT_PY) || $(PYTHON) -m venv $(COMPAT)
	$(COMPAT_PY) -m pip install -q --upgrade pip
	$(COMPAT_PY) -m pip install -q -r tests/compat/requirements.txt
	touch $@

# The same package at the bottom of its ranges (oldest Beam, grpcio and protobuf that pyproject.toml
# allows), so the beam tier is tested at both ends of what we declare; .venv has the newest.
$(BEAM_MIN_STAMP): pyproject.toml setup.py beam_nominal/_pipeline/_fastpath.c tests/beam_min/constraints.txt
	test -x $(BEAM_MIN_PY) || $(PYTHON) -m venv $(BEAM_MIN)
	$(BEAM_MIN_PY) -m pip install -q --upgrade pip
	BEAM_NOMINAL_COMPILE=1 $(BEAM_MIN_PY) -m pip install -q -e '.[test]' -c tests/beam_min/constraints.txt
	touch $@

demo: $(STAMP)
	$(PY) -m pipelines.synthetic_telemetry --demo

lint: $(STAMP)
	$(VENV)/bin/ruff check beam_nominal pipelines tests benchmarks tools setup.py
	$(VENV)/bin/mypy beam_nominal
	$(PY) tools/gen_proto.py --check

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP)
	$(PY) -m pytest -q tests/integration

beam: $(STAMP)
	$(PY) -m pytest -q tests/beam

# The pure build: the compiled module is built (BEAM_NOMINAL_COMPILE=1 above) but not imported
# (BEAM_NOMINAL_TEST_PURE=1, beam_nominal/_pipeline/__init__.py), so the Python implementations an
# install without a C compiler runs are tested too. Slow tests exercise nothing build-specific.
PURE_TESTS := BEAM_NOMINAL_TEST_PURE=1 $(PY) -m pytest -q -p no:cacheprovider tests/unit tests/beam -m "not slow"

pure: $(STAMP)
	$(PURE_TESTS)

# Runners outside the venv (Prism, built with Go), cached under ~/.cache/beam-nominal/engines, and
# the Java example (examples/java, built with Maven; its jars cached in ~/.m2) by tools/engines.py;
# the tests skip, or fail under BEAM_NOMINAL_NO_SKIP=1, where one is missing.
engines-fetch: $(STAMP)
	$(PY) tools/engines.py

engines: engines-fetch
	$(PY) -m pytest -q tests/engines

# The suite again at the floors (integration covers the oldest grpcio and protobuf). test_proto_fresh
# checks the repo, not the runtime, and needs grpcio-tools (the dev extra): .venv runs it. Tests
# marked slow (real outages, Ctrl+C trials) exercise no version-specific code: .venv runs them.
BEAM_MIN_TESTS := $(BEAM_MIN_PY) -m pytest -q -p no:cacheprovider tests/unit tests/integration tests/beam \
	--deselect tests/unit/test_proto_fresh.py::test_generated_stubs_are_fresh -m "not slow"

beam-min: $(BEAM_MIN_STAMP)
	$(BEAM_MIN_TESTS)

compat: $(COMPAT_STAMP)
	PYTHONPATH=$(CURDIR) $(COMPAT_PY) -m pytest -q -p no:cacheprovider tests/compat

test: lint engines-fetch $(COMPAT_STAMP) $(BEAM_MIN_STAMP)
	$(PY) -m pytest -q tests/unit tests/integration tests/beam tests/engines
	$(PURE_TESTS)
	$(BEAM_MIN_TESTS)
	PYTHONPATH=$(CURDIR) $(COMPAT_PY) -m pytest -q -p no:cacheprovider tests/compat

proto: $(STAMP)
	$(PY) tools/gen_proto.py

bench: $(STAMP)
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) $(COMPAT) $(BEAM_MIN) .pytest_cache .mypy_cache .ruff_cache nominal-data
